// Command kubevirt-check runs KubeVirt's own VirtualMachine validation over YAML files: the
// function behind virt-api's VirtualMachine admission webhook
// (admitters.ValidateVirtualMachineSpec), with a cluster configuration that permits GPU and
// host-device passthrough, as a cluster running inferplane's VMs must. What it cannot see is
// what a node decides at run time (device names against permittedHostDevices, capacity).
//
// Usage:
//
//	kubevirt-check PATH...
//
// Each PATH is a YAML file or a folder walked for *.yaml and *.yml; every VirtualMachine in
// them (multi-document streams included; other kinds are skipped) is checked. Every reason a
// VM is refused is printed as "<file>: VirtualMachine <namespace>/<name>: <field>: <message>",
// then a summary line. Exit status: 0 all accepted, 1 a VM refused, 2 unreadable input.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-config/featuregate"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: kubevirt-check PATH... (YAML files or folders of them)")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(paths []string, stdout, stderr io.Writer) int {
	files, err := yamlFiles(paths)
	if err != nil {
		fmt.Fprintf(stderr, "kubevirt-check: %v\n", err)
		return 2
	}
	config := clusterConfig()
	var vms, refused int
	for _, f := range files {
		found, err := readVMs(f)
		if err != nil {
			fmt.Fprintf(stderr, "kubevirt-check: %s: %v\n", f, err)
			return 2
		}
		for _, vm := range found {
			vms++
			causes := admitters.ValidateVirtualMachineSpec(k8sfield.NewPath("spec"), &vm.Spec, config, false)
			if len(causes) > 0 {
				refused++
			}
			for _, c := range causes {
				fmt.Fprintf(stdout, "%s: VirtualMachine %s/%s: %s: %s\n", f, vm.Namespace, vm.Name, c.Field, c.Message)
			}
		}
	}
	fmt.Fprintf(stdout, "kubevirt-check: %d VirtualMachines in %d files, %d refused\n", vms, len(files), refused)
	if refused > 0 {
		return 1
	}
	return 0
}

// clusterConfig is a KubeVirt cluster configuration with host-device passthrough on (GPU
// passthrough is generally available and always on in this release), built with KubeVirt's own
// helper for tests of its admitters.
func clusterConfig() *virtconfig.ClusterConfig {
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{
		DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{featuregate.HostDevicesGate}},
	})
	return config
}

// yamlFiles expands folders into the YAML files under them, in walk (lexical) order.
func yamlFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (path == p || strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(files) == 0 {
		return nil, errors.New("no YAML files in " + strings.Join(paths, ", "))
	}
	return files, nil
}

// readVMs decodes every VirtualMachine of a YAML stream.
func readVMs(file string) ([]v1.VirtualMachine, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var vms []v1.VirtualMachine
	for i := 1; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return vms, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var tm metav1.TypeMeta
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if tm.Kind != "VirtualMachine" || !strings.HasPrefix(tm.APIVersion, v1.GroupVersion.Group+"/") {
			continue
		}
		var vm v1.VirtualMachine
		if err := json.Unmarshal(raw, &vm); err != nil {
			return nil, fmt.Errorf("document %d (VirtualMachine): %w", i, err)
		}
		vms = append(vms, vm)
	}
}
