// Package guest checks and boots what inferplane renders for the inside of a replica's VM: the
// cloud-init user-data and network-data of every node, the files it writes (the launcher, the
// systemd unit), and the guest image that `make guest-image` builds (hack/guest). The checks
// run the real consumers: cloud-init's own schema check and network parser, netplan,
// systemd-analyze (shellcheck on the launchers is e2e/setupscripts' TestShellcheck); the boot runs the guest in QEMU with the VM's disks, NICs, memory and CPUs
// as virt-launcher would give them (vm.go). docs/guest.md says what is proven and what not.
//
// Everything it needs is Debian's packages, installed by hack/guesttools.sh when missing (as
// root); where that is impossible a test says SKIPPED with why, unless INFERPLANE_REQUIRE_GUEST=1
// (make test sets it), which fails it instead.
package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator"
)

// Node is one rendered VirtualMachine of a job with the cloud-init its Secret holds.
type Node struct {
	// Dir is the job folder (out/<tenant>/jobs/<job>); Name the VM's name.
	Dir, Name   string
	VM          kubevirtv1.VirtualMachine
	UserData    string
	NetworkData string
}

// WriteFile is one entry of a cloud-config's write_files.
type WriteFile struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
}

// cloudConfig is as much of a cloud-config as the checks read.
type cloudConfig struct {
	WriteFiles []WriteFile `json:"write_files"`
}

// WriteFiles is the files a user-data writes, by path.
func WriteFiles(userData string) ([]WriteFile, error) {
	var cc cloudConfig
	if err := yaml.Unmarshal([]byte(userData), &cc); err != nil {
		return nil, fmt.Errorf("user-data: %w", err)
	}
	return cc.WriteFiles, nil
}

// GenerateExamples renders the bundled examples (recipes/ and tenants/ of this checkout) into
// dir and returns every node of every job, sorted by folder and name.
func GenerateExamples(ctx context.Context, dir string) ([]Node, error) {
	root := kubeenv.RepoRoot()
	if _, err := generator.Generate(ctx, generator.Options{
		RecipesDir: filepath.Join(root, "recipes"), TenantsDir: filepath.Join(root, "tenants"), OutDir: dir,
	}); err != nil {
		return nil, err
	}
	jobs, err := filepath.Glob(filepath.Join(dir, "*", "jobs", "*"))
	if err != nil {
		return nil, err
	}
	var nodes []Node
	for _, j := range jobs {
		n, err := ReadJob(j)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n...)
	}
	return nodes, nil
}

// ReadJob reads the nodes of one rendered job folder: each *-vm.yaml with the Secret its
// cloudInitNoCloud volume names.
func ReadJob(dir string) ([]Node, error) {
	vms, err := filepath.Glob(filepath.Join(dir, "*-vm.yaml"))
	if err != nil {
		return nil, err
	}
	if len(vms) == 0 {
		return nil, fmt.Errorf("%s: no *-vm.yaml", dir)
	}
	sort.Strings(vms)
	var nodes []Node
	for _, f := range vms {
		var vm kubevirtv1.VirtualMachine
		if err := readYAML(f, &vm); err != nil {
			return nil, err
		}
		n := Node{Dir: dir, Name: vm.Name, VM: vm}
		if err := n.readCloudInit(); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// readCloudInit finds the Secret of the node's cloudInitNoCloud volume among the folder's files
// and takes its keys as KubeVirt does (userdata, networkdata).
func (n *Node) readCloudInit() error {
	if n.VM.Spec.Template == nil {
		return errors.New("no template")
	}
	var src *kubevirtv1.CloudInitNoCloudSource
	for _, v := range n.VM.Spec.Template.Spec.Volumes {
		if v.CloudInitNoCloud != nil {
			src = v.CloudInitNoCloud
		}
	}
	if src == nil || src.UserDataSecretRef == nil {
		return errors.New("no cloudInitNoCloud volume with a userDataSecretRef")
	}
	files, err := filepath.Glob(filepath.Join(n.Dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		var s corev1.Secret
		if err := readYAML(f, &s); err != nil || s.Kind != "Secret" || s.Name != src.UserDataSecretRef.Name {
			continue
		}
		n.UserData = s.StringData["userdata"]
		if src.NetworkDataSecretRef != nil {
			n.NetworkData = s.StringData["networkdata"]
			if n.NetworkData == "" {
				return fmt.Errorf("Secret %s has no networkdata, which the VM's networkDataSecretRef asks for", s.Name)
			}
		}
		if n.UserData == "" {
			return fmt.Errorf("Secret %s has no userdata", s.Name)
		}
		return nil
	}
	return fmt.Errorf("no Secret %s in the folder", src.UserDataSecretRef.Name)
}

func readYAML(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// IsScript says whether a written file is a bash script (its first line names bash).
func IsScript(f WriteFile) bool {
	first, _, _ := strings.Cut(f.Content, "\n")
	return strings.HasPrefix(first, "#!") && strings.Contains(first, "bash")
}

// Mode is the file's permissions as cloud-init applies them (an octal string; 0644 when unset).
func (f WriteFile) Mode() os.FileMode {
	m, err := strconv.ParseUint(f.Permissions, 8, 32)
	if f.Permissions == "" || err != nil {
		return 0o644
	}
	return os.FileMode(m)
}
