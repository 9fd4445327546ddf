//go:build !wasip1

package guest

import "log"

func hostLog(level int32, msg string) { log.Printf("guest log (level %d): %s", level, msg) }
