package readmetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const readme = "# Title\n\n" +
	"<!-- readme-test TestX: run -->\n```sh\nexport A=1\necho \"$A\"   # a comment\n```\n\n" +
	"```sh\necho unmarked\n```\n\n" +
	"<!-- readme-test TestY: run -->\n```sh\necho other\n```\n\n" +
	"<!-- readme-test TestX: background -->\n```sh\nsleep 600\n```\n"

func writeREADME(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

// The blocks a test's markers name, in order, and nothing else.
func TestBlocks(t *testing.T) {
	blocks, err := Blocks(writeREADME(t, readme), "TestX")
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	assert.Equal(t, Block{How: "run", Text: "export A=1\necho \"$A\"   # a comment\n", Line: 3}, blocks[0])
	assert.Equal(t, "background", blocks[1].How)
	assert.Equal(t, []string{"export A=1", `echo "$A"`}, Commands(blocks[0]))

	_, err = Blocks(writeREADME(t, readme), "TestZ")
	assert.ErrorContains(t, err, "no block marked <!-- readme-test TestZ")
	_, err = Blocks(writeREADME(t, "<!-- readme-test TestX: run -->\ntext\n"), "TestX")
	assert.ErrorContains(t, err, ":1: the marker must be right above a ```sh block")
}

// Every sh block of a section, to the next heading of its level; a marker makes one background.
func TestSectionBlocks(t *testing.T) {
	text := "## Try it\n\nFirst:\n\n```sh\nmake build\n```\n\n### Detail\n\n" +
		"<!-- readme-test TestX: background -->\n```sh\nmake demo\n```\n\n```go\nnot shell\n```\n\n## Next\n\n```sh\nnot this\n```\n"
	blocks, err := SectionBlocks(writeREADME(t, text), "Try it", "TestX")
	require.NoError(t, err)
	assert.Equal(t, []Block{{How: "run", Text: "make build\n", Line: 5}, {How: "background", Text: "make demo\n", Line: 12}}, blocks)

	_, err = SectionBlocks(writeREADME(t, text), "Try it", "TestY")
	assert.ErrorContains(t, err, ":11: the block is marked for TestX, in a section TestY runs")
	_, err = SectionBlocks(writeREADME(t, text), "Missing", "TestX")
	assert.ErrorContains(t, err, `has no section "Missing"`)
}

// A block runs through bash with PATH and HOME only, and its output is cut per command (an
// export traced once).
func TestRunOnlyPATHAndHOME(t *testing.T) {
	t.Setenv("READMETEST_SECRET", "leaked")
	b := Block{How: "run", Text: "export A=1\necho \"a=$A secret=${READMETEST_SECRET:-none}\"\nenv\n"}
	out, err := Run(context.Background(), t.TempDir(), b, time.Minute)
	require.NoError(t, err, string(out))
	steps := out.Steps()
	require.Len(t, steps, 3, "%q", out)
	assert.Equal(t, "export A=1", steps[0].Command)
	assert.Equal(t, "a=1 secret=none\n", steps[1].Output)
	assert.NotContains(t, steps[2].Output, "READMETEST_SECRET")
	assert.Contains(t, steps[2].Output, "HOME="+os.Getenv("HOME")+"\n")
	assert.Contains(t, steps[2].Output, "INFERPLANE_E2E_OWNER="+strconv.Itoa(os.Getpid())+"\n", "the stray check's owner mark")

	_, err = Run(context.Background(), t.TempDir(), Block{Text: "false\necho never\n"}, time.Minute)
	assert.Error(t, err, "a failing command fails the block")
}

// RunWatching hands each line to the watcher while the block still runs: a command that waits
// for the reader (here, for a file the watcher writes on reading "ready") goes on.
func TestRunWatchingSeesLinesAsPrinted(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	b := Block{How: "run", Text: "echo ready\nwhile [ ! -e go ]; do sleep 0.05; done\necho done\n"}
	out, err := RunWatching(context.Background(), dir, b, time.Minute, func(line string) {
		lines = append(lines, line)
		if line == "ready" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
		}
	})
	require.NoError(t, err, string(out))
	assert.Contains(t, lines, "ready")
	assert.Equal(t, "done", lines[len(lines)-1])
	assert.Equal(t, string(out), strings.Join(lines, "\n")+"\n", "every line, in order, and all the output")
}

// A background block is stopped as Ctrl-C stops it, which is not a failure.
func TestBackgroundStopsOnCtrlC(t *testing.T) {
	bg, err := Start(t.TempDir(), Block{How: "background", Text: "echo up\nsleep 600\n"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return bg.Output() != "" }, time.Minute, 50*time.Millisecond)
	assert.NoError(t, bg.Stop(time.Minute))
}

// A test binary that dies with a background block running (a test timeout's panic runs no
// clean-up) does not leave the block behind: its watchdog stops the block's group. The dying
// binary is this one, run again as a child that starts a block and exits at once.
func TestBackgroundEndsWithTheTestBinary(t *testing.T) {
	if dir := os.Getenv("READMETEST_DIE_WITH_A_BLOCK"); dir != "" {
		_, err := Start(dir, Block{How: "background", Text: "echo $$ > group.pid\nsleep 600\n"})
		if err != nil {
			os.Exit(3)
		}
		for range 600 {
			if _, err := os.Stat(filepath.Join(dir, "group.pid")); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		os.Exit(2) // as a timeout's panic does: no Stop
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBackgroundEndsWithTheTestBinary$")
	cmd.Env = append(os.Environ(), "READMETEST_DIE_WITH_A_BLOCK="+dir)
	var ee *exec.ExitError
	require.True(t, errors.As(cmd.Run(), &ee) && ee.ExitCode() == 2, "the child exits as a panicking test binary does")
	b, err := os.ReadFile(filepath.Join(dir, "group.pid"))
	require.NoError(t, err)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }, time.Minute, 50*time.Millisecond,
		"the block's process group %d outlived the test binary", pgid)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
