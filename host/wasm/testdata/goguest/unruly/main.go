// Command unruly is a Go guest for host/wasm tests that misbehaves on
// request: the input's content says how.
package main

import (
	"errors"
	"strings"

	"github.com/agenthost/agenthost/sdk/guest"
)

var sink [][]byte

func recurse(n int) int { return recurse(n+1) + 1 }

func init() {
	guest.Register(guest.Guest{
		Name:    "unruly",
		Actions: []string{guest.Queue},
		InputPolicy: func(r *guest.Request) (guest.Decision, error) {
			switch r.Content {
			case "panic":
				panic("asked to panic")
			case "error":
				return guest.Decision{}, errors.New("asked to fail")
			case "overflow":
				recurse(0)
			case "hog":
				for {
					sink = append(sink, make([]byte, 1<<20))
				}
			case "log":
				guest.Log(guest.LevelInfo, "hello from Go")
			case "bigerror":
				// 3 MiB over many lines, with an attempt at a forged log line.
				return guest.Decision{}, errors.New(strings.Repeat("x\nlevel=ERROR msg=forged ", 3<<20/24))
			case "badlog":
				guest.Log(guest.LevelWarn, "line one\nlevel=ERROR msg=forged \x1b[31m")
			}
			return guest.Decision{Action: guest.Queue}, nil
		},
	})
}

func main() {}
