// Command agenthost is the agenthost server and its command line client.
//
//	agenthost serve                 run the server (HTTP API) on the embedded default
//	agenthost demo                  play the absorbed-input story and print its timeline
//	agenthost submit THREAD TEXT    submit an input, optionally wait for its answer
//	agenthost runs list THREAD      list a thread's runs
//	agenthost runs show RUN         show a run and its result
//	agenthost thread show THREAD    read a thread's conversation
//	agenthost threads list          list the threads
//	agenthost cancel RUN            cancel a queued or active run
//	agenthost version               print the build's version
//
// The thread or run a command is about is its first argument.
//
// Run "agenthost help" or "agenthost COMMAND --help" for details.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() { os.Exit(main1()) }

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and the answer is "no" (a failed check, a run that failed)
	exitUsage = 2 // bad usage, bad config, cannot connect or launch
)

func main1() int {
	if code, ok := servePluginIfAsked(); ok {
		return code
	}
	args := os.Args[1:]
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(os.Stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := args[0]
	if len(args) > 1 && (name == "runs" || name == "thread" || name == "threads" || name == "driver" || name == "policy") && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
		args = args[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "agenthost: unknown command %q\n\n", name)
		usage(os.Stderr)
		return exitUsage
	}
	return cmd.run(args[1:], os.Stdout, os.Stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "agenthost: a durable runtime for LLM agent runs.\n\nUsage: agenthost COMMAND [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"agenthost COMMAND --help\" for a command's flags and an example.")
}
