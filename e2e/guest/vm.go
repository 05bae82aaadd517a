package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/e2e/proc"
)

// Boot is how to boot one rendered node: the disks KubeVirt would give it, made from files on
// this machine.
type Boot struct {
	Node Node
	// RootDisk is the guest image's disk (the containerDisk's file). Each boot gets a fresh
	// copy-on-write overlay of it, as virt-launcher gives each VMI: nothing written to the root
	// survives the VM.
	RootDisk string
	// Dir holds this boot's files (overlay, cloud-init and Secret disks, console, QEMU's log).
	Dir string
	// VolumeDisks are the files that stand for the node's PersistentVolumeClaims, by volume
	// name (the model cache): raw, kept across boots as a PVC is.
	VolumeDisks map[string]string
	// Secrets are the Secrets the node's Secret volumes name, by Secret name: key -> content.
	// A Secret missing here is a Secret that does not exist (an optional volume gets an empty
	// disk with its label, as virt-launcher makes it).
	Secrets map[string]map[string]string
	// ExtraDisks are disks no rendered volume names (the boot test's image seed), attached
	// after the VM's own.
	ExtraDisks []string
	// VendorData, when set, goes on the NoCloud disk beside the rendered user-data (KubeVirt
	// gives none): cloud-init merges it in, so a test adds its own observers and stand-ins
	// without changing a byte of what was rendered.
	VendorData string
	// MaxCPUs and MaxMemoryMiB cap what the VMI asks for (a GPU node's 24 cores and 225 GiB do
	// not fit this machine); the VM records what it was given.
	MaxCPUs      int
	MaxMemoryMiB int64
	// Accel is "kvm", "tcg", or "" for KVM when it boots and TCG otherwise.
	Accel string
}

// VM is one QEMU process running a node.
type VM struct {
	Boot    Boot
	Console string // the serial console's file (ttyS0, what logSerialConsole streams)
	// Ports maps each guest port the pod network forwards to its port on 127.0.0.1.
	Ports map[int32]int
	// Accel is the accelerator it runs with; Given says what of the VMI it got and what not
	// (GPUs and host devices cannot be passed through here).
	Accel string
	Given []string
	proc  *proc.Process
	qmp   string
}

// Start boots b. With Accel "", it tries KVM and falls back to TCG when the guest prints
// nothing past the firmware within kvmGrace; once KVM has failed, later boots of the same test
// process go to TCG at once.
func Start(b Boot, tools map[string]string) (*VM, error) {
	if b.Accel != "" {
		return start(b, tools, b.Accel)
	}
	note := "KVM did not boot a guest earlier in this run: TCG"
	if !kvmFailed.Load() {
		vm, err := start(b, tools, "kvm")
		if err == nil {
			if vm.waitConsole(func(s string) bool { return strings.Contains(s, "Linux version") }, kvmGrace) == nil {
				return vm, nil
			}
			vm.Stop()
		}
		kvmFailed.Store(true)
		note = "KVM: the kernel printed nothing in " + kvmGrace.String() + ": TCG instead"
	}
	vm, err := start(b, tools, "tcg")
	if vm != nil {
		vm.Given = append(vm.Given, note)
	}
	return vm, err
}

// kvmGrace is how long KVM gets to reach the kernel (it boots in seconds where it works, GRUB
// waiting none).
const kvmGrace = 60 * time.Second

// kvmFailed is set when a KVM try fell back to TCG.
var kvmFailed atomic.Bool

func start(b Boot, tools map[string]string, accel string) (*VM, error) {
	vm := &VM{Boot: b, Accel: accel, Ports: map[int32]int{}, Console: filepath.Join(b.Dir, "console-"+accel+".log"),
		qmp: filepath.Join(b.Dir, "qmp-"+accel+".sock")}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return nil, err
	}
	args, err := vm.args(tools)
	if err != nil {
		return nil, err
	}
	_ = os.Remove(vm.Console)
	_ = os.Remove(vm.qmp)
	vm.proc, err = proc.Start("qemu-"+b.Node.Name+"-"+accel, tools["qemu-system-x86_64"], args, []string{"PATH=" + os.Getenv("PATH")}, b.Dir)
	if err != nil {
		return nil, err
	}
	return vm, nil
}

// args is QEMU's command line for the node, the way virt-launcher's domain maps the VMI: q35,
// the VMI's CPU cores and guest memory (capped), its disks in order on virtio with their
// serials, its pod-network interface with masquerade's addresses and forwarded ports, ttyS0.
func (vm *VM) args(tools map[string]string) ([]string, error) {
	b := vm.Boot
	spec := b.Node.VM.Spec.Template.Spec
	uuid := "6a1e3c2b-0000-4000-8000-" + fmt.Sprintf("%012x", hash12(b.Node.Name))
	cpus, mem := 1, int64(1024)
	if c := spec.Domain.CPU; c != nil && c.Cores > 0 {
		cpus = int(c.Cores)
	}
	if m := spec.Domain.Memory; m != nil && m.Guest != nil {
		mem = m.Guest.Value() >> 20
	}
	vm.Given = append(vm.Given, fmt.Sprintf("the VMI asks %d cores and %d MiB", cpus, mem))
	cpus, mem = min(cpus, max(b.MaxCPUs, 1)), min(mem, max(b.MaxMemoryMiB, 512))
	vm.Given = append(vm.Given, fmt.Sprintf("given %d cores and %d MiB", cpus, mem))
	accel := "kvm"
	cpu := "host"
	if vm.Accel == "tcg" {
		accel, cpu = "tcg,thread=multi", "max"
	}
	args := []string{"-name", b.Node.Name, "-machine", "q35", "-accel", accel, "-cpu", cpu,
		"-smp", "cores=" + strconv.Itoa(cpus), "-m", strconv.FormatInt(mem, 10),
		"-nodefaults", "-display", "none", "-vga", "none",
		"-chardev", "file,id=serial0,path=" + vm.Console, "-serial", "chardev:serial0",
		"-qmp", "unix:" + vm.qmp + ",server=on,wait=off",
		"-smbios", "type=1,manufacturer=KubeVirt,product=None,family=KubeVirt,uuid=" + uuid,
		"-uuid", uuid,
	}
	disks, err := vm.diskArgs(tools, spec, uuid)
	if err != nil {
		return nil, err
	}
	args = append(args, disks...)
	nics, err := vm.nicArgs(spec)
	if err != nil {
		return nil, err
	}
	args = append(args, nics...)
	if n := len(spec.Domain.Devices.GPUs) + len(spec.Domain.Devices.HostDevices); n > 0 {
		vm.Given = append(vm.Given, fmt.Sprintf("not passed through: %d GPUs and host devices (none on this machine)", n))
	}
	return args, nil
}

func (vm *VM) diskArgs(tools map[string]string, spec kubevirtv1.VirtualMachineInstanceSpec, uuid string) ([]string, error) {
	b := vm.Boot
	volumes := map[string]kubevirtv1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	var args []string
	for i, d := range spec.Domain.Devices.Disks {
		v, ok := volumes[d.Name]
		if !ok {
			return nil, fmt.Errorf("disk %s has no volume", d.Name)
		}
		file, format, readOnly := "", "raw", false
		switch {
		case v.ContainerDisk != nil:
			file, format = filepath.Join(b.Dir, d.Name+".overlay.qcow2"), "qcow2"
			_ = os.Remove(file)
			abs, err := filepath.Abs(b.RootDisk)
			if err != nil {
				return nil, err
			}
			if out, err := exec.Command(tools["qemu-img"], "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", abs, file).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("qemu-img create: %v: %s", err, out)
			}
		case v.CloudInitNoCloud != nil:
			files := map[string]string{"user-data": b.Node.UserData}
			meta, err := json.Marshal(map[string]string{"instance-id": uuid, "local-hostname": hostname(spec, b.Node.Name)})
			if err != nil {
				return nil, err
			}
			files["meta-data"] = string(meta)
			if b.Node.NetworkData != "" {
				files["network-config"] = b.Node.NetworkData
			}
			if b.VendorData != "" {
				files["vendor-data"] = b.VendorData
			}
			file = filepath.Join(b.Dir, d.Name+".iso")
			if err := iso(tools, file, "cidata", files); err != nil {
				return nil, err
			}
		case v.PersistentVolumeClaim != nil:
			file = b.VolumeDisks[d.Name]
			if file == "" {
				return nil, fmt.Errorf("disk %s: no file stands for claim %s (Boot.VolumeDisks)", d.Name, v.PersistentVolumeClaim.ClaimName)
			}
		case v.Secret != nil:
			data, found := b.Secrets[v.Secret.SecretName]
			if !found && (v.Secret.Optional == nil || !*v.Secret.Optional) {
				return nil, fmt.Errorf("disk %s: Secret %s does not exist and the volume is not optional", d.Name, v.Secret.SecretName)
			}
			file, readOnly = filepath.Join(b.Dir, d.Name+".iso"), true
			if err := iso(tools, file, v.Secret.VolumeLabel, data); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("disk %s: volume kind not supported by the harness", d.Name)
		}
		if d.Disk == nil || d.Disk.Bus != kubevirtv1.DiskBusVirtio {
			return nil, fmt.Errorf("disk %s: only virtio disks are supported by the harness", d.Name)
		}
		drive := fmt.Sprintf("file=%s,format=%s,if=none,id=drive%d,cache=unsafe", file, format, i)
		if readOnly {
			drive += ",readonly=on"
		}
		dev := fmt.Sprintf("virtio-blk-pci,drive=drive%d,id=%s", i, d.Name)
		if d.Serial != "" {
			dev += ",serial=" + d.Serial
		}
		if i == 0 {
			dev += ",bootindex=1"
		}
		args = append(args, "-drive", drive, "-device", dev)
	}
	for i, f := range b.ExtraDisks {
		args = append(args, "-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=extra%d,readonly=on", f, i),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=extra%d", i))
	}
	return args, nil
}

// nicArgs maps the pod network with masquerade to QEMU's user networking, isolated
// (restrict=on: the guest reaches nothing, not this machine, not beyond) with masquerade's
// addresses (the guest 10.0.2.2, the gateway 10.0.2.1) and each declared port forwarded from
// a free port on 127.0.0.1. Other networks (Multus) are not supported yet.
func (vm *VM) nicArgs(spec kubevirtv1.VirtualMachineInstanceSpec) ([]string, error) {
	nets := map[string]kubevirtv1.Network{}
	for _, n := range spec.Networks {
		nets[n.Name] = n
	}
	var args []string
	for i, itf := range spec.Domain.Devices.Interfaces {
		n := nets[itf.Name]
		if n.Pod == nil || itf.Masquerade == nil {
			vm.Given = append(vm.Given, "not attached: interface "+itf.Name+" (only the pod network with masquerade)")
			continue
		}
		netdev := "user,id=net" + strconv.Itoa(i) + ",restrict=on,net=10.0.2.0/24,host=10.0.2.1,dhcpstart=10.0.2.2"
		for _, p := range itf.Ports {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			vm.Ports[p.Port] = port
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", port, p.Port)
		}
		mac := itf.MacAddress
		if mac == "" {
			mac = fmt.Sprintf("02:00:00:%02x:%02x:%02x", i, hash12(vm.Boot.Node.Name)&0xff, (hash12(vm.Boot.Node.Name)>>8)&0xff)
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=net"+strconv.Itoa(i)+",mac="+mac)
	}
	return args, nil
}

// iso writes files to an ISO 9660 image with Joliet and Rock Ridge under the volume label, as
// virt-launcher writes its cloud-init and Secret disks (xorrisofs).
func iso(tools map[string]string, out, label string, files map[string]string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".iso-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	_ = os.Remove(out)
	if o, err := exec.Command(tools["xorrisofs"], "-output", out, "-volid", label, "-joliet", "-rock",
		"-partition_cyl_align", "on", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("xorrisofs %s: %v: %s", out, err, o)
	}
	return nil
}

func hostname(spec kubevirtv1.VirtualMachineInstanceSpec, name string) string {
	if spec.Hostname != "" {
		return spec.Hostname
	}
	return name
}

func hash12(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h & 0xffffffffffff
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ConsoleText is everything the guest has printed on ttyS0 so far.
func (vm *VM) ConsoleText() string {
	b, _ := os.ReadFile(vm.Console)
	return string(b)
}

// WaitConsole waits until ok holds for the console's text, or timeout, or QEMU's exit.
func (vm *VM) WaitConsole(ok func(string) bool, timeout time.Duration) error {
	return vm.waitConsole(ok, timeout)
}

func (vm *VM) waitConsole(ok func(string) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok(vm.ConsoleText()) {
			return nil
		}
		if done, err := vm.proc.Exited(); done {
			return fmt.Errorf("QEMU exited (%v): %s", err, vm.proc.Tail(20))
		}
		if time.Now().After(deadline) {
			return errors.New("not within " + timeout.String())
		}
		time.Sleep(time.Second)
	}
}

// Shutdown asks the guest to power off (ACPI, as a VMI's graceful stop does) and waits up to
// grace for QEMU to exit, then stops it.
func (vm *VM) Shutdown(grace time.Duration) {
	if c, err := net.DialTimeout("unix", vm.qmp, 5*time.Second); err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		dec := json.NewDecoder(c)
		var greeting map[string]any
		_ = dec.Decode(&greeting)
		for _, cmd := range []string{`{"execute":"qmp_capabilities"}`, `{"execute":"system_powerdown"}`} {
			_, _ = c.Write([]byte(cmd + "\n"))
			var reply map[string]any
			_ = dec.Decode(&reply)
		}
		c.Close()
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if done, _ := vm.proc.Exited(); done {
			return
		}
		time.Sleep(time.Second)
	}
	vm.Stop()
}

// Stop ends QEMU at once (a power cut).
func (vm *VM) Stop() { vm.proc.Stop(10 * time.Second) }

// Exited says whether QEMU has ended.
func (vm *VM) Exited() bool {
	done, _ := vm.proc.Exited()
	return done
}
