// Command fleetctl is jetfleet's admin CLI: run a demo, run or submit jobs,
// follow them, inspect and replay dead letters, and plan backoffs.
//
// Exit status: 0 on success, 1 on a failed job or operation, 2 on bad input.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/specenv"
	"github.com/jetfleet/jetfleet/internal/tracing/otlp"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Exit codes (docs/contract.md §7).
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// command is one fleetctl subcommand. run returns the exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) int
}

// cliEnv is what a command may touch: its streams and environment lookup,
// so commands are testable in-process.
type cliEnv struct {
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// tracer records fleetctl's spans when the OTEL_* variables ask for
	// traces (runCLI); nil = none.
	tracer trace.TracerProvider
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("fleetctl: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runCLI(ctx, &cliEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func runCLI(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		fmt.Fprintln(env.stdout, "fleetctl", version.Get())
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "fleetctl: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return exitUsage
	}
	tp, shutdown, err := otlp.Setup(ctx, "fleetctl", env.getenv)
	if err != nil {
		fmt.Fprintf(env.stderr, "fleetctl: %v\n", err)
		return exitUsage
	}
	defer func() {
		// Flush the spans; a collector that does not answer costs at most this.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}()
	env.tracer = tp
	return c.run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fleetctl <command> [flags]")
	fmt.Fprintln(w)
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fleetctl <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(env *cliEnv, name, usageLine string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "usage: fleetctl %s\n", usageLine)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs is parseFlags for a command that takes exactly n positional
// arguments: another count prints the usage.
func parseArgs(fs *flag.FlagSet, args []string, n int) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() != n {
		fs.Usage()
		return exitUsage, false
	}
	return 0, true
}

// parseFlags parses args, flags and positional arguments in any order
// ("run FILE --json" as well as "run --json FILE"); after "--" everything
// is positional. ok=false means the caller should return code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		// A non-boolean flag takes the next argument as its value.
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(append(append(flags, "--"), positional...)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// specArg reads and parses the one FILE argument of fs (YAML or JSON),
// printing every problem; ok=false means exit 2. profile, when given, is
// the job's profile (--profile), over the file's.
func specArg(env *cliEnv, fs *flag.FlagSet, profile ...string) (path string, spec *messages.JobSpec, ok bool) {
	if fs.NArg() != 1 {
		fs.Usage()
		return "", nil, false
	}
	path = fs.Arg(0)
	data, err := os.ReadFile(path)
	if err != nil {
		errorf(env, "%v", err)
		return path, nil, false
	}
	if p := strings.Join(profile, ""); p != "" {
		spec, err = specenv.Parse(data, p)
	} else {
		spec, err = jobspec.Parse(data)
	}
	if err != nil {
		printProblems(env, path, err)
		return path, nil, false
	}
	return path, spec, true
}
