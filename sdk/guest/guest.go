package guest

import (
	"unsafe"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/internal/jsonlite"
)

// Actions.
const (
	Queue     = guestabi.ActionQueue
	Inject    = guestabi.ActionInject
	Interrupt = guestabi.ActionInterrupt
	Reject    = guestabi.ActionReject
)

// Tool decisions.
const (
	Allow = guestabi.ToolAllow
	Deny  = guestabi.ToolDeny
	Ask   = guestabi.ToolAsk
)

type (
	// FullRequest is an inputPolicy request decoded in full (Request.Full).
	FullRequest = guestabi.PolicyRequest
	// Run is a run of the busy thread.
	Run = guestabi.Run
	// Decision is an inputPolicy decision.
	Decision = guestabi.Decision
	// StepRequest is a prepareStep request.
	StepRequest = guestabi.StepRequest
	// StepResult is a prepareStep result.
	StepResult = guestabi.StepResult
	// StepSettings are the settings a prepareStep hook may change.
	StepSettings = guestabi.StepSettings
	// Message is a prompt message.
	Message = guestabi.Message
	// ToolRequest is a toolPolicy request: the tool call to decide. In
	// Guest.ToolPolicy its strings alias the host's request bytes and are
	// valid only during the call (strings.Clone what you keep).
	ToolRequest = guestabi.ToolRequest
	// ToolDecision is a toolPolicy decision.
	ToolDecision = guestabi.ToolDecision
)

// Guest describes a guest. Set any of InputPolicy, PrepareStep and
// ToolPolicy; the manifest declares the hooks that are set.
type Guest struct {
	Name    string
	Version string
	// Actions lists every action InputPolicy can ever return.
	Actions []string
	// Init, if set, receives the configuration blob the host was given for
	// this guest (nil when there is none), once per instance before any hook.
	// An error fails the load.
	Init func(config []byte) error
	// InputPolicy decides an input that arrived at a busy thread. The request
	// is only valid during the call.
	InputPolicy func(*Request) (Decision, error)
	// PrepareStep rewrites a step's settings. Start the result from the
	// request's settings: the host replaces every setting with the result's.
	PrepareStep func(*StepRequest) (StepResult, error)
	// ToolPolicy decides whether a tool call the model asked for runs
	// (Allow), is refused with a message the model sees (Deny), or waits for
	// people to approve it (Ask, with a prompt and the number of approvals,
	// 0 meaning 1). A decision that is not valid (guestabi.ValidToolDecision)
	// is reported to the host as an error, which then uses its fallback.
	ToolPolicy func(*ToolRequest) (ToolDecision, error)
}

var registered *Guest

// Request is an inputPolicy request. Reading the fields costs nothing: its
// strings alias the host's request bytes and are valid only during the call
// (strings.Clone them to keep them). Full decodes the rest: metadata, the
// runs and their inputs.
type Request struct {
	ThreadID string
	Content  string
	Hint     string
	// Active reports whether the thread has an active run, and ActiveSteps
	// how many model steps it has finished.
	Active      bool
	ActiveSteps int
	// Queued is the number of queued runs.
	Queued int
	raw    []byte
}

// Full decodes the whole request, copying.
func (r *Request) Full() (*FullRequest, error) {
	var f FullRequest
	if err := guestabi.DecodePolicyRequest(r.raw, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// NewRequest returns the Request a guest would see for r, for tests that run
// a guest's functions natively.
func NewRequest(r *FullRequest) *Request {
	var req Request
	if err := readRequest(guestabi.AppendPolicyRequest(nil, r), &req); err != nil {
		panic(err)
	}
	return &req
}

func readRequest(b []byte, r *Request) error {
	var h guestabi.PolicyHeader
	if err := guestabi.ReadPolicyHeader(b, &h); err != nil {
		return err
	}
	*r = Request{
		ThreadID:    viewAny(h.ThreadID),
		Content:     viewAny(h.Content),
		Hint:        viewAny(h.Hint),
		Active:      h.Active,
		ActiveSteps: int(h.ActiveSteps),
		Queued:      int(h.Queued),
		raw:         b,
	}
	return nil
}

// viewAny is view without a branch: unsafe.String takes any pointer for an
// empty string, and a slice with no capacity left points at its array's
// start, never past its end.
func viewAny(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// readToolRequest reads a toolPolicy request without copying its strings.
func readToolRequest(b []byte, r *ToolRequest) error {
	var f guestabi.ToolFields
	step, err := guestabi.ReadToolRequest(b, &f)
	if err != nil {
		return err
	}
	*r = ToolRequest{Step: step, Tool: view(f[0]), Server: view(f[1]), Arguments: view(f[2]),
		CallID: view(f[3]), IdempotencyKey: view(f[4]), RunID: view(f[5]), ThreadID: view(f[6])}
	return nil
}

// Register registers the guest. Call it once, from an init function.
func Register(g Guest) {
	if registered != nil {
		panic("guest: Register called twice")
	}
	registered = &g
}

// NewStepResult returns a result that changes nothing.
func NewStepResult(r *StepRequest) StepResult {
	return StepResult{StepSettings: r.StepSettings}
}

// Log levels.
const (
	LevelDebug = guestabi.LogDebug
	LevelInfo  = guestabi.LogInfo
	LevelWarn  = guestabi.LogWarn
	LevelError = guestabi.LogError
)

// Log writes a message to the host's log.
func Log(level int, msg string) { hostLog(int32(level), msg) }

// ParseArguments parses a tool call's arguments (ToolRequest.Arguments, the
// JSON text the model produced) into plain values: map[string]any for an
// object, []any, string, float64, bool or nil. Arguments that are not JSON
// are an error.
func ParseArguments(args string) (any, error) {
	v, err := jsonlite.Parse([]byte(args))
	if err != nil {
		return nil, errorString("arguments: " + err.Error())
	}
	return v, nil
}
