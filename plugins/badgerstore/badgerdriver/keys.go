package badgerdriver

import (
	"encoding/binary"

	"github.com/agenthost/agenthost/abi/record"
)

// The key space. Every key starts with a one-byte table prefix.
//
//	t <thread id>                     thread header: be64 last message seq, then storepb.Thread
//	r <run id>                        storepb.Run
//	s <state> 0x00 <run id>           index of runs by state (empty value)
//	i <len thread id> <thread> <key>  storepb.Idempotency
//	h <len thread id> <thread> <be64 seq>  storepb.Message: the thread's history
//	m <message id>                    message id is taken (empty value)
//
// <len ...> is a uvarint, so that one thread's keys never prefix another's.
const (
	tThread  = 't'
	tRun     = 'r'
	tState   = 's'
	tIdem    = 'i'
	tHistory = 'h'
	tMsgID   = 'm'
)

func simpleKey(table byte, id string) []byte {
	k := make([]byte, 0, 1+len(id))
	return append(append(k, table), id...)
}

func threadKey(id string) []byte { return simpleKey(tThread, id) }
func runKey(id string) []byte    { return simpleKey(tRun, id) }
func msgIDKey(id string) []byte  { return simpleKey(tMsgID, id) }

func statePrefix(st record.RunState) []byte {
	k := make([]byte, 0, 2+len(st))
	return append(append(append(k, tState), st...), 0)
}

func stateKey(st record.RunState, runID string) []byte {
	return append(statePrefix(st), runID...)
}

func threadPrefix(table byte, threadID string) []byte {
	k := make([]byte, 0, 1+binary.MaxVarintLen64+len(threadID)+8)
	k = append(k, table)
	k = binary.AppendUvarint(k, uint64(len(threadID)))
	return append(k, threadID...)
}

func idemKey(threadID, key string) []byte {
	return append(threadPrefix(tIdem, threadID), key...)
}

func historyKey(threadID string, seq int64) []byte {
	return binary.BigEndian.AppendUint64(threadPrefix(tHistory, threadID), uint64(seq))
}

// Step records (store protocol 2):
//
//	p <len run id> <run> <be64 seq>  storepb.Step: the run's step log
//	q <step id>                      step id is taken (empty value)
//
// The last seq of a run's log is the seq of its last p key. Store format 1
// kept it under a key of its own as well, n <run id> (be64), which
// opening a directory of that format removes (format.go).
//
//	v                                be64 store format version (format.go)
const (
	tStep     = 'p'
	tStepLast = 'n' // format 1 only
	tStepID   = 'q'
	tFormat   = 'v'
)

func stepKey(runID string, seq int64) []byte {
	return binary.BigEndian.AppendUint64(threadPrefix(tStep, runID), uint64(seq))
}

func stepIDKey(id string) []byte { return simpleKey(tStepID, id) }
