// Package kubevirtcheck runs KubeVirt's own VirtualMachine validation (the kubevirt-check tool
// hack/gitopsbin.sh builds from kubevirt.io/kubevirt, virt-api's admitters) over YAML files. It
// is a separate binary because KubeVirt's Go module cannot sit in inferplane's (its k8s.io pins
// differ).
package kubevirtcheck

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Result is what the checker said about a set of files.
type Result struct {
	// VMs is how many VirtualMachines it checked.
	VMs int
	// Refusals are KubeVirt's reasons, one line each:
	// "<file>: VirtualMachine <namespace>/<name>: <field>: <message>".
	Refusals []string
}

var summary = regexp.MustCompile(`^kubevirt-check: (\d+) VirtualMachines in \d+ files, \d+ refused$`)

// Run checks the VirtualMachines in paths (files, or folders walked for YAML) with the
// kubevirt-check binary in dir. A refusal is a Result, not an error; an error means the checker
// could not run or read its input.
func Run(dir string, paths ...string) (Result, error) {
	cmd := exec.Command(filepath.Join(dir, "kubevirt-check"), paths...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return Result{}, fmt.Errorf("kubevirt-check: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r Result
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	m := summary.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		return Result{}, fmt.Errorf("kubevirt-check: no summary line in its output:\n%s", stdout.String())
	}
	r.VMs, _ = strconv.Atoi(m[1])
	r.Refusals = lines[:len(lines)-1]
	if (len(r.Refusals) > 0) != (err != nil) {
		return Result{}, fmt.Errorf("kubevirt-check: exit status and output disagree (%v):\n%s", err, stdout.String())
	}
	return r, nil
}
