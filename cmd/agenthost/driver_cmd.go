package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/internal/builtins"
)

func init() {
	register("conformance", "run the store driver conformance suite against a driver binary or a built-in driver", runConformance)
	register("driver certify", "certify a store driver: run the suite and record it in the host's trust file", runDriverCertify)
	register("driver list", "list the certified store drivers", runDriverList)
	register("driver revoke", "revoke a driver's certificate", runDriverRevoke)
	register("driver prune", "remove the copies of driver binaries no certificate uses", runDriverPrune)
}

func runConformance(args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprintln(stderr, "Usage: agenthost conformance DRIVER [--profile quick|full] [--json FILE] [--junit FILE]\n\nDRIVER is a driver binary's path or a built-in driver name ("+strings.Join(builtins.Names(), ", ")+").")
			fmt.Fprintln(stderr, "Exit status: 0 pass, 1 fail, 2 usage or launch error.\n\nExample:\n  agenthost conformance ./bin/my-driver --profile full --junit report.xml")
			return exitOK
		}
	}
	return conformance.Main(context.Background(), args, stdout, stderr, builtins.Registry{})
}

// driverSource turns a command-line DRIVER into a gate source.
func driverSource(arg string) trust.Source {
	if !strings.ContainsRune(arg, os.PathSeparator) && builtins.Has(arg) {
		return trust.Source{Builtin: arg}
	}
	return trust.Source{Path: arg}
}

// openGate opens the host's trust store. Its log is kept quiet: the
// suite's own report says what happened (and the durability cases kill
// driver processes on purpose).
func openGate(data string, stderr io.Writer) (*trust.Gate, error) {
	return trust.Open(data, trust.Options{Builtins: builtins.Registry{}, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))})
}

func runDriverCertify(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("driver certify", "driver certify [--data DIR] DRIVER", "agenthost driver certify ./bin/my-driver", stderr)
	data := fs.String("data", envOr("AGENTHOST_DATA", "./agenthost-data"), "the host's data directory (env AGENTHOST_DATA)")
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	g, err := openGate(*data, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	cert, rep, err := g.Certify(context.Background(), driverSource(pos[0]))
	if rep != nil {
		rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		if errors.Is(err, trust.ErrRefused) {
			return exitFail
		}
		return exitUsage
	}
	fmt.Fprintf(stdout, "certified %s (%s), suite %s, tiers %v, store protocol %s\n", pos[0], cert.Key, cert.SuiteVersion, cert.Tiers, cert.Protocol())
	return exitOK
}

func runDriverList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("driver list", "driver list [--data DIR] [--json]", "agenthost driver list", stderr)
	data := fs.String("data", envOr("AGENTHOST_DATA", "./agenthost-data"), "the host's data directory (env AGENTHOST_DATA)")
	jsonOut := fs.Bool("json", false, "print JSON")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	g, err := openGate(*data, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	certs, err := g.List()
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	if *jsonOut {
		printJSON(stdout, certs)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tDRIVER\tSOURCE\tSUITE\tTIERS\tPROTOCOL\tCERTIFIED")
	for _, c := range certs {
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%v\t%s\t%s\n", c.Key, c.Driver.Name, c.Driver.Version, c.Source, c.SuiteVersion, c.Tiers, c.Protocol(), c.CertifiedAt.Format("2006-01-02 15:04"))
	}
	tw.Flush()
	return exitOK
}

func runDriverRevoke(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("driver revoke", "driver revoke [--data DIR] KEY", "agenthost driver revoke sha256:3f2a9c1d", stderr)
	data := fs.String("data", envOr("AGENTHOST_DATA", "./agenthost-data"), "the host's data directory (env AGENTHOST_DATA)")
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	g, err := openGate(*data, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	revoked, err := g.Revoke(pos[0])
	for _, c := range revoked {
		fmt.Fprintf(stdout, "revoked %s (%s)\n", c.Key, c.Source)
	}
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	}
	return exitOK
}

func runDriverPrune(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("driver prune", "driver prune [--data DIR] [--stale] [--dry-run]", "agenthost driver prune --stale --dry-run", stderr)
	data := fs.String("data", envOr("AGENTHOST_DATA", "./agenthost-data"), "the host's data directory (env AGENTHOST_DATA)")
	stale := fs.Bool("stale", false, "also remove the certificates this host can no longer use (another suite version, or a source path that no longer holds the certified binary); stop servers of other agenthost versions on this data directory first")
	dryRun := fs.Bool("dry-run", false, "print what would be removed, remove nothing")
	_, code, ok := parseN(fs, args, 0)
	if !ok {
		return code
	}
	g, err := openGate(*data, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	p, err := g.Prune(trust.PruneOptions{Stale: *stale, DryRun: *dryRun})
	verb := "removed"
	if *dryRun {
		verb = "would remove"
	}
	for _, c := range p.Certificates {
		fmt.Fprintf(stdout, "%s certificate %s (%s, suite %s)\n", verb, c.Key, c.Source, c.SuiteVersion)
	}
	for _, d := range p.Copies {
		fmt.Fprintf(stdout, "%s copy %s\n", verb, d)
	}
	fmt.Fprintf(stdout, "%s %d certificates, %d copies (%.1f MiB)\n", verb, len(p.Certificates), len(p.Copies), float64(p.Bytes)/(1<<20))
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	}
	return exitOK
}
