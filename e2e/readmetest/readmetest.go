// Package readmetest runs README's marked shell blocks as a reader would: through bash, in a
// copy of the checkout, with an environment that holds PATH and HOME and nothing else, so a
// walkthrough passes only if every variable it needs is set by the README itself.
//
// A block is marked by the HTML comment right above its ```sh fence:
//
//	<!-- readme-test TestREADMEWalkthrough: run -->
//
// naming the test that runs it and how: "run" (to its end, every command must succeed: bash
// -e), or "background" (started and left running, as in a second terminal, until the test
// stops it). The test reads the blocks from README.md itself, so README and test cannot drift
// apart: a block edited in README is what runs.
//
// Or a test runs every ```sh block of a named section (SectionBlocks, Walk.Section): then a
// block needs a marker only to be "background"; a section a reader follows top to bottom is
// run whole, and a block added to it is run too.
package readmetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferplane/inferplane/e2e/proc"
)

// Block is one marked shell block.
type Block struct {
	// How is "run" or "background".
	How  string
	Text string
	// Line is the README line of the block's marker (Blocks) or fence (SectionBlocks).
	Line int
}

var marker = regexp.MustCompile(`^<!-- readme-test (\S+): (run|background) -->$`)

// Blocks are the blocks of the README at path marked for test, in order.
func Blocks(path, test string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	var out []Block
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil || m[1] != test {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			return nil, fmt.Errorf("%s:%d: the marker must be right above a ```sh block", path, i+1)
		}
		b := Block{How: m[2], Line: i + 1}
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.Text += lines[j] + "\n"
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: the block does not end", path, i+1)
		}
		out = append(out, b)
		i = j
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no block marked <!-- readme-test %s: run|background -->", path, test)
	}
	return out, nil
}

// SectionBlocks are every ```sh block of the README section whose heading is heading (any
// level; up to the next heading of that level or above), in order: "run" unless the marker
// right above says "background" (a marker there must name test).
func SectionBlocks(path, heading, test string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	level, start := 0, -1
	for i, l := range lines {
		if hashes := len(l) - len(strings.TrimLeft(l, "#")); hashes > 0 && strings.TrimSpace(l[hashes:]) == heading {
			level, start = hashes, i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s has no section %q", path, heading)
	}
	var out []Block
	for i := start + 1; i < len(lines); i++ {
		if hashes := len(lines[i]) - len(strings.TrimLeft(lines[i], "#")); hashes > 0 && hashes <= level && strings.HasPrefix(lines[i][hashes:], " ") {
			break
		}
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		b := Block{How: "run", Line: i + 1}
		if i > 0 {
			if m := marker.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				if m[1] != test {
					return nil, fmt.Errorf("%s:%d: the block is marked for %s, in a section %s runs", path, i, m[1], test)
				}
				b.How = m[2]
			}
		}
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.Text += lines[j] + "\n"
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: the block does not end", path, i+1)
		}
		out = append(out, b)
		i = j
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: section %q has no ```sh block", path, heading)
	}
	return out, nil
}

// Checkout copies the checkout at root into a new folder for the walkthrough to change
// freely: the files git tracks or would track (untracked ones not ignored too), without .git.
// The copy's .cache is the checkout's build cache (cache), as for a reader who built the test
// tools there before (make test, make kubebin): tools are reused, nothing else is shared.
func Checkout(t testing.TB, root, cache string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := exec.Command("git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("list the checkout's files (git ls-files): %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, dst)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(dst, data, st.Mode().Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if cache != "" {
		if err := os.Symlink(cache, filepath.Join(dir, ".cache")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Env is the environment a block runs in: PATH and HOME, nothing else.
func Env() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
}

// command is bash running text in dir, tracing each command (bash -x) so the output can be
// cut by command, and stopping at the first that fails (-e, -o pipefail).
func command(ctx context.Context, dir, text string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-x", "-c", text)
	cmd.Dir = dir
	// The owner mark names this test binary to the stray check and the next run's reaper (it
	// changes nothing the block does): a block this binary leaves behind is found either way.
	cmd.Env = append(Env(), "PS4=+ ", proc.OwnerEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its children are stopped with it
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// Run runs a block to its end (at most timeout) and returns what it wrote, stdout and stderr
// together in order.
func Run(ctx context.Context, dir string, b Block, timeout time.Duration) (Output, error) {
	return RunWatching(ctx, dir, b, timeout, nil)
}

// RunWatching is Run that also hands each line the block prints, as it prints it, to onLine
// (nil: none): what a reader reads on the terminal while a command waits for them.
func RunWatching(ctx context.Context, dir string, b Block, timeout time.Duration, onLine func(line string)) (Output, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := command(ctx, dir, b.Text)
	var out bytes.Buffer
	var w io.Writer = &out
	if onLine != nil {
		w = &lineWriter{to: &out, onLine: onLine}
	}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %s: %w", timeout, ctx.Err())
	}
	return Output(out.String()), err
}

// lineWriter writes through and calls onLine with each whole line.
type lineWriter struct {
	to      io.Writer
	partial []byte
	onLine  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.onLine(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return w.to.Write(p)
}

// Background is a block left running.
type Background struct {
	cmd      *exec.Cmd
	watchdog *exec.Cmd
	mu       sync.Mutex
	out      bytes.Buffer
	done     chan error
}

// Start starts a block and leaves it running, watched: if this test binary dies before it
// stops the block (a test timeout's panic runs no clean-up), the block is stopped as Ctrl-C
// would stop it, then killed (watch).
func Start(dir string, b Block) (*Background, error) {
	bg := &Background{done: make(chan error, 1)}
	bg.cmd = command(context.Background(), dir, b.Text)
	bg.cmd.Stdout, bg.cmd.Stderr = (*lockedWriter)(bg), (*lockedWriter)(bg)
	if err := bg.cmd.Start(); err != nil {
		return nil, err
	}
	w, err := watch(bg.cmd.Process.Pid)
	if err != nil {
		_ = syscall.Kill(-bg.cmd.Process.Pid, syscall.SIGKILL)
		_ = bg.cmd.Wait()
		return nil, err
	}
	bg.watchdog = w
	go func() {
		err := bg.cmd.Wait()
		// Ended: its group's number is free for another, which the watchdog must not signal.
		_ = w.Process.Kill()
		bg.done <- err
	}()
	return bg, nil
}

// watch starts a watchdog of the process group pgid, in a group of its own, that waits for the
// end of a pipe only this process holds (close-on-exec: no other child inherits it). The pipe
// ends when this process does, however it dies; the watchdog then interrupts the group, and
// kills it if it is still there 30 s later. Stop kills the watchdog first.
func watch(pgid int) (*exec.Cmd, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c",
		`read -r _ || true; kill -INT -- "-$1" 2>/dev/null || exit 0; sleep 30; kill -KILL -- "-$1" 2>/dev/null; exit 0`,
		"readmetest-watchdog", strconv.Itoa(pgid))
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the watchdog of a background block: %w", err)
	}
	// The write end lives as long as this process: held by the goroutine below until the
	// watchdog ends (killed by Stop, or after doing its job when the pipe closed).
	go func() {
		_ = cmd.Wait()
		w.Close()
	}()
	return cmd, nil
}

type lockedWriter Background

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

// Output is what it wrote so far.
func (bg *Background) Output() string {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	return bg.out.String()
}

// Done is closed (receives the exit error) when the block ended by itself.
func (bg *Background) Done() <-chan error { return bg.done }

// Stop interrupts the block as Ctrl-C in its terminal would (SIGINT to its process group),
// waits up to grace for it to end, then kills the group.
func (bg *Background) Stop(grace time.Duration) error {
	_ = bg.watchdog.Process.Kill()
	_ = syscall.Kill(-bg.cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-bg.done:
		// Ended by the Ctrl-C, as a shell in a terminal is (make dies of the SIGINT it
		// passed on): that is the block stopping as asked.
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGINT {
				return nil
			}
		}
		return err
	case <-time.After(grace):
		_ = syscall.Kill(-bg.cmd.Process.Pid, syscall.SIGKILL)
		<-bg.done
		return fmt.Errorf("did not stop within %s of Ctrl-C: killed", grace)
	}
}

// Output is a block's output with bash's trace of each command ("+ cmd") in it.
type Output string

// Step is one command of a block and what it wrote.
type Step struct {
	Command string
	Output  string
}

// Steps cuts the output at each traced command of the block itself (bash's "+ "; the commands
// of a sourced file, traced as "++ ", stay with the command that sourced it).
func (o Output) Steps() []Step {
	var steps []Step
	sc := bufio.NewScanner(strings.NewReader(string(o)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if cmd, ok := strings.CutPrefix(line, "+ "); ok {
			// bash traces "export A=b" twice: the export, then the assignment "A=b".
			if n := len(steps); n > 0 && steps[n-1].Output == "" && "export "+cmd == steps[n-1].Command {
				continue
			}
			steps = append(steps, Step{Command: cmd})
			continue
		}
		if len(steps) == 0 {
			steps = append(steps, Step{})
		}
		steps[len(steps)-1].Output += line + "\n"
	}
	return steps
}

// Commands are a block's command lines: neither empty nor comments.
func Commands(b Block) []string {
	var out []string
	for _, l := range strings.Split(b.Text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if i := strings.Index(l, "  #"); i > 0 {
				l = strings.TrimSpace(l[:i])
			}
			out = append(out, l)
		}
	}
	return out
}

// Walk is a walkthrough test: the blocks README marks for one test, run in order as a reader
// would, each checked against what it printed.
type Walk struct {
	// README is the README's path; Test the name its markers give (the test's t.Name()).
	README, Test string
	// Section, when set, runs every ```sh block of the section with that heading
	// (SectionBlocks) instead of only the blocks marked for Test.
	Section string
	// Root is the checkout that is copied (Checkout); Cache the .cache folder the copy shares.
	Root, Cache string
	// Hows are the blocks' "run" and "background", in order: README must keep this shape.
	Hows []string
	// RunTimeout bounds each "run" block.
	RunTimeout time.Duration
	// Ready, after a "background" block started, is polled until it is true (the block is
	// ready for the next), for at most ReadyTimeout.
	Ready        func(dir string) bool
	ReadyTimeout time.Duration
	// Redact hides secrets (API keys) from the test's log.
	Redact func(string) string
	// OnLine, when set, is handed each line a "run" block prints as it prints it, with the
	// outputs of the blocks before it ("background" ones: what they wrote by the time they
	// were ready): the test does there what the reader would do on reading it (open a
	// sign-in page the command printed and sign in with what the demo's terminal shows).
	OnLine func(line string, before []Output)
}

// Run copies the checkout and runs the blocks in order: a "run" block to its end (it must
// succeed), a "background" block started and left running until the test ends, when it is
// stopped as Ctrl-C would stop it. It returns the copy, the blocks and each block's output
// ("background" blocks: what they wrote by the time they were ready).
func (w Walk) Run(t *testing.T) (string, []Block, []Output) {
	t.Helper()
	blocks, err := Blocks(w.README, w.Test)
	if w.Section != "" {
		blocks, err = SectionBlocks(w.README, w.Section, w.Test)
	}
	if err != nil {
		t.Fatal(err)
	}
	hows := make([]string, len(blocks))
	for i, b := range blocks {
		hows[i] = b.How
	}
	if strings.Join(hows, ",") != strings.Join(w.Hows, ",") {
		t.Fatalf("README's blocks marked for %s are %v; the test expects %v", w.Test, hows, w.Hows)
	}
	redact := w.Redact
	if redact == nil {
		redact = func(s string) string { return s }
	}
	dir := Checkout(t, w.Root, w.Cache)
	outs := make([]Output, len(blocks))
	for i, b := range blocks {
		if b.How == "run" {
			var onLine func(string)
			if w.OnLine != nil {
				before := outs[:i]
				onLine = func(line string) { w.OnLine(line, before) }
			}
			out, err := RunWatching(context.Background(), dir, b, w.RunTimeout, onLine)
			t.Logf("README block at line %d:\n%s", b.Line, redact(string(out)))
			if err != nil {
				t.Fatalf("README block at line %d: %v", b.Line, err)
			}
			outs[i] = out
			continue
		}
		bg, err := Start(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := bg.Stop(2 * time.Minute); err != nil {
				t.Errorf("README block at line %d (stopped as by Ctrl-C): %v", b.Line, err)
			}
			t.Logf("README block at line %d, left running:\n%s", b.Line, redact(bg.Output()))
		})
		w.waitReady(t, dir, b, bg)
		outs[i] = Output(bg.Output())
	}
	return dir, blocks, outs
}

func (w Walk) waitReady(t *testing.T, dir string, b Block, bg *Background) {
	t.Helper()
	if w.Ready == nil {
		return
	}
	deadline := time.After(w.ReadyTimeout)
	for !w.Ready(dir) {
		select {
		case err := <-bg.Done():
			t.Fatalf("README block at line %d ended before it was ready (%v):\n%s", b.Line, err, bg.Output())
		case <-deadline:
			t.Fatalf("README block at line %d not ready after %s:\n%s", b.Line, w.ReadyTimeout, bg.Output())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Check holds each command of a "run" block to what it must print: checks maps a command's
// name (name(line)) to its check of that command's output. A command README runs that has no
// check, or a check whose command README no longer runs, fails the test: README and test
// cannot drift apart.
func Check(t *testing.T, b Block, out Output, name func(line string) string, checks map[string]func(out string)) {
	t.Helper()
	commands, steps := Commands(b), out.Steps()
	if len(steps) != len(commands) {
		t.Errorf("README block at line %d: %d commands but %d traced steps:\n%v", b.Line, len(commands), len(steps), steps)
		return
	}
	seen := map[string]bool{}
	for i, c := range commands {
		n := name(c)
		check, ok := checks[n]
		if !ok {
			t.Errorf("README runs %q (named %q), which the test has no check for", c, n)
			continue
		}
		if got := name(steps[i].Command); got != n {
			t.Errorf("step %d: README's command is %q but bash ran %q", i, c, steps[i].Command)
		}
		check(steps[i].Output)
		seen[n] = true
	}
	for n := range checks {
		if !seen[n] {
			t.Errorf("README's walkthrough no longer runs %q: update README or the test", n)
		}
	}
}
