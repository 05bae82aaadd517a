// Package servetest attacks a server the way slow and hostile clients do, on loopback, and
// says how it held: each attack is answered or cut within the server's bounds, the server's
// peak memory grows by no more than a bound, and a normal client is served meanwhile (Run).
package servetest

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Peak measures how much a process's peak resident memory (VmHWM) grows over an attack. It
// resets the peak first (clear_refs 5), so a higher peak earlier in the test does not hide the
// attack's; where that is refused it measures from the earlier peak, which can only understate
// the growth's absence, never invent one.
type Peak struct {
	pid  int
	base int64
}

// StartPeak starts measuring process pid (0: this process).
func StartPeak(pid int) (*Peak, error) {
	if pid == 0 {
		pid = os.Getpid()
		runtime.GC() // the garbage of earlier work is not the attack's
	}
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	st, err := procStatus(pid)
	if err != nil {
		return nil, err
	}
	// After the reset the peak is the resident memory of now.
	return &Peak{pid: pid, base: st["VmHWM"]}, nil
}

// Growth is how far the peak has grown since StartPeak, in bytes.
func (p *Peak) Growth() (int64, error) {
	st, err := procStatus(p.pid)
	if err != nil {
		return 0, err
	}
	return max(st["VmHWM"]-p.base, 0), nil
}

// procStatus reads the kB fields of /proc/<pid>/status, in bytes.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 2 && fields[1] == "kB" {
			if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				out[name] = v << 10
			}
		}
	}
	if out["VmHWM"] == 0 {
		return nil, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return out, sc.Err()
}
