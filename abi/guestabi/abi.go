package guestabi

// Version is the ABI version this package describes. A guest reports the
// version it implements from ExportABIVersion.
const Version = 1

// Exports a guest provides. The signatures are given in wasm types.
const (
	// ExportABIVersion: () -> i32. Returns the ABI version (1). The host calls
	// it first and refuses any other value.
	ExportABIVersion = "agenthost_abi_version"
	// ExportAlloc: (size i32) -> i32. Returns the address of a region of at
	// least size bytes the host may write a request into, or 0 if it cannot.
	ExportAlloc = "agenthost_alloc"
	// ExportInit: (ptr i32, len i32) -> i64. Optional. Receives the guest's
	// configuration blob once per instance, before anything else but the
	// version. Returns a packed result whose body is empty.
	ExportInit = "agenthost_init"
	// ExportManifest: () -> i64. Returns a packed result whose body is the
	// manifest as JSON.
	ExportManifest = "agenthost_manifest"
	// ExportInputPolicy: (ptr i32, len i32) -> i64. Required when the manifest
	// declares HookInputPolicy. Reads a binary policy request, returns a
	// packed result whose body is a binary decision.
	ExportInputPolicy = "agenthost_input_policy"
	// ExportPrepareStep: (ptr i32, len i32) -> i64. Required when the manifest
	// declares HookPrepareStep. Reads a StepRequest as JSON, returns a packed
	// result whose body is a StepResult as JSON.
	ExportPrepareStep = "agenthost_prepare_step"
	// ExportToolPolicy: (ptr i32, len i32) -> i64. Required when the
	// manifest declares HookToolPolicy. Reads a binary ToolRequest, returns a
	// packed result whose body is a binary ToolDecision.
	ExportToolPolicy = "agenthost_tool_policy"
	// ExportMemory is the guest's linear memory. It must be exported.
	ExportMemory = "memory"
	// ExportInitialize is the WASI reactor initializer. If the guest exports
	// it, the host calls it once per instance before anything else.
	ExportInitialize = "_initialize"
)

// Imports the host provides.
const (
	// ImportModule is the module name of the host's own imports.
	ImportModule = "agenthost"
	// ImportLog: (level i32, ptr i32, len i32) -> (). Writes a UTF-8 message
	// of len bytes at ptr to the host's log at level (Log* constants).
	ImportLog = "log"
	// WASIModule is the module name of the WASI preview 1 functions the host
	// provides (only those in WASIAllowed).
	WASIModule = "wasi_snapshot_preview1"
)

// Log levels for ImportLog.
const (
	LogDebug = 0
	LogInfo  = 1
	LogWarn  = 2
	LogError = 3
)

// MaxLogMessage is the length beyond which the host truncates a log message.
const MaxLogMessage = 4096

// WASIAllowed lists the WASI preview 1 functions a guest may import: what a
// language runtime (Go's wasip1 port in particular) needs to start and run.
// They see no preopened directories, no environment, no arguments; standard
// output and error go to the host log. Anything else (path_*, sock_*, ...)
// is refused at load.
var WASIAllowed = []string{
	"args_get", "args_sizes_get",
	"environ_get", "environ_sizes_get",
	"clock_res_get", "clock_time_get",
	"fd_close", "fd_fdstat_get", "fd_fdstat_set_flags",
	"fd_prestat_get", "fd_prestat_dir_name",
	"fd_write", "fd_read", "fd_seek",
	"poll_oneoff", "proc_exit", "random_get", "sched_yield",
}

// Result status, the first byte of every result body.
const (
	StatusOK    = 0
	StatusError = 1
)

// Pack packs a result address and length into the i64 a hook returns.
func Pack(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// Unpack is the inverse of Pack.
func Unpack(v uint64) (ptr, length uint32) { return uint32(v >> 32), uint32(v) }

// Hook names, as they appear in Manifest.Hooks.
const (
	HookInputPolicy = "inputPolicy"
	HookPrepareStep = "prepareStep"
	HookToolPolicy  = "toolPolicy"
)

// Action names, as they appear in Manifest.Actions.
const (
	ActionQueue     = "queue"
	ActionInject    = "inject"
	ActionInterrupt = "interrupt"
	ActionReject    = "reject"
)

// Action codes in a binary decision.
const (
	CodeQueue     byte = 1
	CodeInject    byte = 2
	CodeInterrupt byte = 3
	CodeReject    byte = 4
)

// ActionCode returns the binary code of an action name, 0 if unknown.
func ActionCode(name string) byte {
	switch name {
	case ActionQueue:
		return CodeQueue
	case ActionInject:
		return CodeInject
	case ActionInterrupt:
		return CodeInterrupt
	case ActionReject:
		return CodeReject
	}
	return 0
}

// ActionName returns the name of a binary action code, "" if unknown.
func ActionName(code byte) string {
	switch code {
	case CodeQueue:
		return ActionQueue
	case CodeInject:
		return ActionInject
	case CodeInterrupt:
		return ActionInterrupt
	case CodeReject:
		return ActionReject
	}
	return ""
}

// Manifest is what a guest declares about itself, returned as JSON by
// ExportManifest.
type Manifest struct {
	// ABI repeats the ABI version; optional, must be Version if present.
	ABI int `json:"abi,omitempty"`
	// Name and Version identify the guest; Name is required.
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	// Hooks lists the hooks the guest implements (Hook* constants); at least
	// one.
	Hooks []string `json:"hooks"`
	// Actions lists every action the inputPolicy can ever return (Action*
	// constants); required, non-empty, with HookInputPolicy.
	Actions []string `json:"actions,omitempty"`
}

// Limits the host states and enforces (SPEC §11).
const (
	// MaxModuleBytes bounds the size of a module file: a larger one is
	// refused at load.
	MaxModuleBytes = 32 << 20
	// MaxRequestBytes bounds a request of any hook, and the
	// configuration blob: a larger one fails the call (fallback) without
	// calling the guest.
	MaxRequestBytes = 16 << 20
	// MaxManifestBytes bounds the manifest body; MaxManifestString a
	// manifest's name and version.
	MaxManifestBytes  = 64 << 10
	MaxManifestString = 128
	// MaxResultBytes bounds a prepareStep result body; an error message is
	// cut to MaxErrorMessage bytes in the host's errors, logs and events.
	MaxResultBytes  = 16 << 20
	MaxErrorMessage = 1024
)
