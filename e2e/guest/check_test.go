package guest_test

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/guest"
)

// examples renders the bundled examples once for every test of the package.
var examples = sync.OnceValues(func() ([]guest.Node, error) {
	dir, err := os.MkdirTemp("", "guest-examples-")
	if err != nil {
		return nil, err
	}
	return guest.GenerateExamples(context.Background(), dir)
})

func bundledNodes(t *testing.T) []guest.Node {
	t.Helper()
	nodes, err := examples()
	require.NoError(t, err)
	// The bundled examples hold every shape the guard must cover: single-node vLLM, a
	// multi-node replica (network-data, the fabric NIC), Parakeet.
	var multi, parakeet bool
	for _, n := range nodes {
		multi = multi || n.NetworkData != ""
		parakeet = parakeet || n.VM.Labels["inferplane.io/runtime"] == "parakeet"
	}
	require.True(t, multi && parakeet, "the bundled examples lost their multi-node or Parakeet job")
	return nodes
}

// TestRenderedUserDataPassesCloudInitSchema: every node's user-data of the bundled examples is
// a cloud-config that cloud-init's own schema check (Debian's cloud-init, the guest's version)
// accepts without errors or deprecations.
func TestRenderedUserDataPassesCloudInitSchema(t *testing.T) {
	tools := guest.Tools(t, "check")
	nodes := bundledNodes(t)
	dir := t.TempDir()
	for _, n := range nodes {
		f := filepath.Join(dir, n.Name+".user-data")
		require.NoError(t, os.WriteFile(f, []byte(n.UserData), 0o600))
		out, err := exec.Command(tools["cloud-init"], "schema", "--config-file", f).CombinedOutput()
		assert.NoError(t, err, "%s/%s: cloud-init schema: %s", n.Dir, n.Name, out)
		assert.Contains(t, string(out), "Valid cloud-config", "%s: %s", n.Name, out)
		assert.NotContains(t, string(out), "deprecat", "%s: %s", n.Name, out)
	}
	t.Logf("cloud-init schema accepted %d user-data", len(nodes))
}

// TestCloudInitSchemaRefusesBrokenUserData: the check is not a rubber stamp.
func TestCloudInitSchemaRefusesBrokenUserData(t *testing.T) {
	tools := guest.Tools(t, "check")
	n := bundledNodes(t)[0]
	broken := strings.Replace(n.UserData, "runcmd:\n", "runcmd: systemctl\nbootcmd:\n", 1)
	broken = strings.Replace(broken, `permissions: "0755"`, "permissions: 0755", 1)
	require.NotEqual(t, n.UserData, broken)
	f := filepath.Join(t.TempDir(), "user-data")
	require.NoError(t, os.WriteFile(f, []byte(broken), 0o600))
	out, err := exec.Command(tools["cloud-init"], "schema", "--config-file", f).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "permissions: 493 is not of type 'string'")
}

// netplanCheck parses network-data with cloud-init's own parser, renders it with cloud-init's
// netplan renderer (what the guest image configures) into a root, runs netplan generate there
// and prints the systemd-networkd files netplan wrote, each as "== name" then its content.
const netplanCheck = `
import os, subprocess, sys, yaml
from cloudinit.net import network_state, netplan
root, src = sys.argv[1], sys.argv[2]
cfg = yaml.safe_load(open(src))
ns = network_state.parse_net_config_data(cfg)
# A relative path: the renderer joins it to the target (an absolute one would be this machine's).
netplan.Renderer({"netplan_path": "etc/netplan/50-cloud-init.yaml", "postcmds": False}).render_network_state(ns, target=root)
subprocess.run([sys.argv[3], "generate", "--root-dir", root], check=True)
d = os.path.join(root, "run/systemd/network")
for f in sorted(os.listdir(d)):
    print("== " + f)
    print(open(os.path.join(d, f)).read())
`

// TestNetworkDataConfiguresEveryNIC: the multi-node nodes' network-data, as the guest reads it
// (cloud-init parses it and hands it to netplan unchanged; netplan writes systemd-networkd's
// files), turns DHCP on for every NIC whose name starts with "e": the pod network's and the
// fabric's. cloud-init's own renderers would not: they take "nics" for an interface's name.
func TestNetworkDataConfiguresEveryNIC(t *testing.T) {
	tools := guest.Tools(t, "check")
	seen := 0
	for _, n := range bundledNodes(t) {
		if n.NetworkData == "" {
			continue
		}
		seen++
		dir := t.TempDir()
		src := filepath.Join(dir, "network-config")
		require.NoError(t, os.WriteFile(src, []byte(n.NetworkData), 0o600))
		root := filepath.Join(dir, "root")
		out, err := exec.Command(guest.DebianPython, "-c", netplanCheck, root, src, tools["netplan"]).CombinedOutput()
		require.NoError(t, err, "%s: %s", n.Name, out)
		assert.Contains(t, string(out), "[Match]\nName=e*\n", "%s: %s", n.Name, out)
		assert.Contains(t, string(out), "DHCP=ipv4", "%s: %s", n.Name, out)
		assert.NotContains(t, string(out), "Name=nics", "%s: %s", n.Name, out)
	}
	require.NotZero(t, seen, "no node with network-data in the bundled examples")
}

// TestUnitsPassSystemdVerify: every systemd unit a user-data writes passes systemd-analyze
// verify in a root holding what the guest image has: Debian's systemd, docker.io and containerd
// (their units and binaries), and the files the same user-data writes.
func TestUnitsPassSystemdVerify(t *testing.T) {
	tools := guest.Tools(t, "check")
	base := guest.DebianRoot(t, "systemd", "docker.io", "containerd")
	units := 0
	for _, n := range bundledNodes(t) {
		files, err := guest.WriteFiles(n.UserData)
		require.NoError(t, err, n.Name)
		// A linked copy of the packages' files: fast, and each node's files are written after
		// removing whatever they replace, so the shared base is never changed.
		root := filepath.Join(t.TempDir(), "root")
		out, err := exec.Command("cp", "-al", base, root).CombinedOutput()
		require.NoError(t, err, "%s", out)
		var names []string
		for _, f := range files {
			p := filepath.Join(root, f.Path)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.RemoveAll(p))
			require.NoError(t, os.WriteFile(p, []byte(f.Content), f.Mode()))
			if strings.HasSuffix(f.Path, ".service") {
				names = append(names, path.Base(f.Path))
			}
		}
		for _, u := range names {
			units++
			out, err := exec.Command(tools["systemd-analyze"], "verify", "--root="+root, u).CombinedOutput()
			assert.NoError(t, err, "%s %s: systemd-analyze verify:\n%s", n.Name, u, out)
			assert.Empty(t, strings.TrimSpace(string(out)), "%s %s", n.Name, u)
		}
	}
	require.NotZero(t, units, "no systemd unit in the rendered user-data")
}

// TestSystemdVerifyRefusesABrokenUnit: the check is not a rubber stamp: a unit whose command is
// not in the root, or that needs a unit the root lacks, is refused.
func TestSystemdVerifyRefusesABrokenUnit(t *testing.T) {
	tools := guest.Tools(t, "check")
	base := guest.DebianRoot(t, "systemd")
	root := filepath.Join(t.TempDir(), "root")
	out, err := exec.Command("cp", "-al", base, root).CombinedOutput()
	require.NoError(t, err, "%s", out)
	unit := filepath.Join(root, "etc/systemd/system/broken.service")
	require.NoError(t, os.MkdirAll(filepath.Dir(unit), 0o755))
	require.NoError(t, os.WriteFile(unit, []byte("[Unit]\nRequires=docker.service\n[Service]\nExecStart=/usr/local/bin/missing\n"), 0o644))
	out, err = exec.Command(tools["systemd-analyze"], "verify", "--root="+root, "broken.service").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "Unit docker.service not found")
	assert.Contains(t, string(out), "/usr/local/bin/missing is not executable")
}

// TestGuestImageCloudConfigPassesSchema: the cloud-init settings the guest image adds
// (hack/guest/rootfs/etc/cloud/cloud.cfg.d) pass cloud-init's schema check too.
func TestGuestImageCloudConfigPassesSchema(t *testing.T) {
	tools := guest.Tools(t, "check")
	files, err := filepath.Glob(filepath.Join("..", "..", "hack", "guest", "rootfs", "etc", "cloud", "cloud.cfg.d", "*.cfg"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		p := filepath.Join(t.TempDir(), "cfg")
		require.NoError(t, os.WriteFile(p, append([]byte("#cloud-config\n"), b...), 0o600))
		out, err := exec.Command(tools["cloud-init"], "schema", "--config-file", p).CombinedOutput()
		assert.NoError(t, err, "%s: %s", f, out)
	}
}
