package render

import (
	"strconv"
	"strings"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Paths inside the guest. The guest image provides the NVIDIA driver, the NVIDIA container
// toolkit, Docker and the inferplane binary (docs/rendering.md); everything else comes from
// this cloud-init.
const (
	guestScript    = "/usr/local/bin/inferplane-model-server"
	guestAgent     = "/usr/local/bin/inferplane"
	guestUnit      = "inferplane-model-server.service"
	guestContainer = "inferplane-model-server"
	guestCacheDir  = "/var/lib/inferplane/model-cache"
	guestTokenDir  = "/run/inferplane/hf-token"
	// containerCache is where vLLM (and Hugging Face libraries in general) keep downloads.
	containerCache = "/root/.cache/huggingface"
)

// networkData turns DHCP on for every NIC of a multi-node guest, the fabric NIC included
// (cloud-init's fallback configures only the first). optional: a NIC without a lease does not
// hold up boot.
const networkData = `version: 2
ethernets:
  nics:
    match:
      name: "e*"
    dhcp4: true
    optional: true
`

// userData is a node's cloud-config: a launcher script that prepares the node and runs the
// inference agent, and a systemd unit that runs the launcher (and again if the agent ever
// exits; the agent itself restarts the model server). head is the node's launcherHead.
func userData(t *tenant, j *job, r, n int32, head string) string {
	var b strings.Builder
	b.Grow(len(head) + 2048)
	b.WriteString("#cloud-config\n# inferplane: tenant ")
	b.WriteString(t.name)
	b.WriteString(", job ")
	b.WriteString(j.name)
	b.WriteString(", replica ")
	b.WriteString(itoa(r))
	b.WriteString(", node ")
	b.WriteString(itoa(n))
	b.WriteString(" of ")
	b.WriteString(itoa(j.nodes))
	b.WriteString(" (")
	b.WriteString(policy.Role(n))
	b.WriteString(").\n")
	b.WriteString("# Rendered from the job's plan and regenerated on every run: edit the inputs, not this.\n" +
		"write_files:\n" +
		"  - path: " + guestScript + "\n" +
		"    permissions: \"0755\"\n" +
		"    content: |\n")
	// The script, as the body of a YAML block scalar: every line indented; YAML strips the
	// indentation again, so each line (also inside a quoted multi-line argument) reads back
	// unchanged.
	b.WriteString(head)
	for _, a := range launcherTail(t, j, r, n) {
		b.WriteString(" \\\n" + scriptIndent + "    ")
		writeIndented(&b, a)
	}
	b.WriteString("\n")
	b.WriteString("  - path: /etc/systemd/system/" + guestUnit + "\n" +
		"    content: |\n" +
		scriptIndent + "[Unit]\n" +
		scriptIndent + "Description=inferplane model server (")
	b.WriteString(t.name)
	b.WriteString("/")
	b.WriteString(policy.VMName(j.name, r, n))
	b.WriteString(")\n" +
		scriptIndent + "Wants=network-online.target\n" +
		scriptIndent + "After=network-online.target docker.service\n" +
		scriptIndent + "Requires=docker.service\n" +
		"\n" +
		scriptIndent + "[Service]\n" +
		scriptIndent + "ExecStart=" + guestScript + "\n" +
		// The agent stops the server on SIGTERM: its grace (30 s), then a kill.
		scriptIndent + "TimeoutStopSec=90\n" +
		scriptIndent + "Restart=always\n" +
		scriptIndent + "RestartSec=10\n" +
		"\n" +
		scriptIndent + "[Install]\n" +
		scriptIndent + "WantedBy=multi-user.target\n" +
		"runcmd:\n" +
		"  - [systemctl, daemon-reload]\n" +
		"  - [systemctl, enable, --now, " + guestUnit + "]\n")
	return b.String()
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

// scriptIndent is the indentation of the files' content in the cloud-config.
const scriptIndent = "      "

// writeIndented writes text whose first line continues the current one: the lines after each
// newline get scriptIndent (empty lines stay empty).
func writeIndented(b *strings.Builder, text string) {
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			b.WriteString(text)
			return
		}
		b.WriteString(text[:i+1])
		text = text[i+1:]
		if text != "" && text[0] != '\n' {
			b.WriteString(scriptIndent)
		}
	}
}

// launcherHead is the launcher script, indented for the cloud-config, up to the model
// server's arguments (without a final newline): the same on every node of a job that serves
// (serving) or on every one that does not. It runs the inference agent (`inferplane agent`,
// docs/agent.md) with what `docker run` was given before the agent: the runtime image,
// `vllm serve <model> <args>` or the Parakeet image with its args; a node that serves no HTTP
// (a --headless worker) has no health check.
func launcherHead(t *tenant, j *job, serving bool) string {
	var b strings.Builder
	b.Grow(3072)
	ln := func(lines ...string) {
		for _, l := range lines {
			if l != "" {
				b.WriteString(scriptIndent)
				b.WriteString(l)
			}
			b.WriteString("\n")
		}
	}
	ln("#!/bin/bash",
		"set -euo pipefail",
		"",
		"# Model cache: the PVC-backed disk keeps downloaded weights across restarts.",
		"cache_dev=/dev/disk/by-id/virtio-"+cacheSerial,
		"mkdir -p "+guestCacheDir,
		`blkid "$cache_dev" >/dev/null 2>&1 || mkfs.ext4 -q -L model-cache "$cache_dev"`,
		"mountpoint -q "+guestCacheDir+` || mount "$cache_dev" `+guestCacheDir,
		"",
		"# Hugging Face token: the optional Secret "+t.opts.HFTokenSecret+` (key "token"), attached as a disk; never written here.`,
		"if [ -e /dev/disk/by-label/"+hfTokenLabel+" ]; then",
		"  mkdir -p "+guestTokenDir,
		"  mountpoint -q "+guestTokenDir+" || mount -o ro /dev/disk/by-label/"+hfTokenLabel+" "+guestTokenDir,
		"fi",
		"if [ -r "+guestTokenDir+"/token ]; then",
		`  HF_TOKEN="$(cat `+guestTokenDir+`/token)"`,
		"  export HF_TOKEN",
		"fi",
		"")
	if j.multiNode() {
		ln("# NCCL and Gloo talk over the fabric NIC (the second NIC; the first is the pod network).",
			`IFACE_NAME="$(ip -o link show | awk -F': ' '$2 != "lo" {print $2}' | sed -n 2p)"`)
	} else {
		ln("# The NIC of the default route, for any $IFACE_NAME in the master's env.",
			`IFACE_NAME="$(ip -o -4 route show default | awk '{print $5; exit}')"`)
	}
	health := "http://127.0.0.1:" + strconv.Itoa(v1alpha1.ServingPort) + "/health"
	if !serving {
		health = "''"
	}
	ln("export IFACE_NAME",
		"",
		"# The inference agent runs the model server's container, restarts it when it exits and",
		"# writes its lines to the serial console (docs/agent.md).",
		"exec "+guestAgent+" agent --name "+guestContainer+" --health-url "+health+` \`,
		`  --all-gpus --ipc host --network host \`)
	if j.multiNode() && j.nodeType.Spec.InfiniBand != nil {
		ln(`  --host-device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1 \`)
	}
	ln("  --volume "+guestCacheDir+":"+containerCache+` \`,
		`  --env HF_TOKEN \`)
	for _, e := range j.p.Env {
		if e.SecretKey != "" {
			// Read from the Secret's disk in the guest by the agent, which redacts it.
			b.WriteString(scriptIndent + "  --secret-env " + shellQuote(e.Name+"="+guestTokenDir+"/"+e.SecretKey) + " \\\n")
			continue
		}
		b.WriteString(scriptIndent + "  --env ")
		writeIndented(&b, shellQuoteExpandIface(e.Name+"="+e.Value))
		b.WriteString(" \\\n")
	}
	var args []string
	if j.runtime == v1alpha1.RuntimeVLLM {
		ln(`  --entrypoint vllm \`)
		args = append(args, "serve", j.p.Master.Spec.Model)
	}
	args = append(args, j.p.Args...)
	b.WriteString(scriptIndent + "  ")
	writeIndented(&b, shellQuote(j.image))
	for _, a := range argLines(args) {
		b.WriteString(" \\\n" + scriptIndent + "    ")
		writeIndented(&b, a)
	}
	return b.String()
}

// launcherTail is what a node adds to the model server's arguments, one line per flag:
// nothing on a single-node replica; under vLLM's data-parallel launcher the head's address
// and, on the other nodes, the first data-parallel rank they run; else vLLM's --nnodes
// launcher flags, with --headless on every rank but the head.
func launcherTail(t *tenant, j *job, r, n int32) []string {
	if !j.multiNode() {
		return nil
	}
	if j.dpLocal > 0 {
		tail := []string{
			"--data-parallel-address " + shellQuote(headAddress(t, j, r)),
			"--data-parallel-rpc-port " + strconv.Itoa(DataParallelRPCPort),
		}
		if n > 0 {
			tail = append(tail, "--data-parallel-start-rank "+itoa(n*j.dpLocal))
		}
		return tail
	}
	tail := []string{
		"--nnodes " + itoa(j.nodes),
		"--node-rank " + itoa(n),
		"--master-addr " + shellQuote(headAddress(t, j, r)),
		"--master-port " + strconv.Itoa(MasterPort),
	}
	if n > 0 {
		tail = append(tail, "--headless")
	}
	return tail
}

// argLines quotes args and puts one flag per line, with its value when it has one (for the
// reader only: the shell sees the same words either way).
func argLines(args []string) []string {
	var lines []string
	for i := 0; i < len(args); i++ {
		l := shellQuote(args[i])
		if i+1 < len(args) && pairs(args[i], args[i+1]) {
			i++
			l += " " + shellQuote(args[i])
		}
		lines = append(lines, l)
	}
	return lines
}

// pairs reports whether next is the value of the flag arg.
func pairs(arg, next string) bool {
	if arg == "serve" {
		return true
	}
	return strings.HasPrefix(arg, "-") && !strings.Contains(arg, "=") && !strings.HasPrefix(next, "-")
}

// shellQuote quotes s for a POSIX shell: nothing inside single quotes is special.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,+@%", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellQuoteExpandIface quotes s like shellQuote but lets $IFACE_NAME (and ${IFACE_NAME})
// expand: the recipes' strategies set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to it, and the
// launcher sets it to the right NIC. No other variable or command substitution can run.
func shellQuoteExpandIface(s string) string {
	var b strings.Builder
	for s != "" {
		i, n := ifaceRef(s)
		if i < 0 {
			b.WriteString(shellQuote(s))
			break
		}
		if i > 0 {
			b.WriteString(shellQuote(s[:i]))
		}
		b.WriteString(`"$IFACE_NAME"`)
		s = s[i+n:]
	}
	return b.String()
}

// ifaceRef finds the first $IFACE_NAME or ${IFACE_NAME} in s: its index and length.
func ifaceRef(s string) (int, int) {
	for off := 0; ; {
		i := strings.IndexByte(s[off:], '$')
		if i < 0 {
			return -1, 0
		}
		i += off
		rest := s[i:]
		if strings.HasPrefix(rest, "${IFACE_NAME}") {
			return i, len("${IFACE_NAME}")
		}
		if strings.HasPrefix(rest, "$IFACE_NAME") {
			// Not a longer name such as $IFACE_NAME2.
			end := i + len("$IFACE_NAME")
			if end == len(s) || !isNameChar(s[end]) {
				return i, len("$IFACE_NAME")
			}
		}
		off = i + 1
	}
}

func isNameChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
