package store

// Every prompt in the tests is computed both by the memo and by the window
// projection, and fails if they differ.
func init() { verifyMemo = true }
