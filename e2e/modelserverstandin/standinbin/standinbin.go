// Package standinbin builds the stand-in model server (e2e/modelserverstandin) for a test
// binary that runs it as a process.
package standinbin

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// Build compiles the stand-in into dir and returns its path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "modelserverstandin")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/inferplane/inferplane/e2e/modelserverstandin").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the stand-in model server: %w\n%s", err, out)
	}
	return bin, nil
}
