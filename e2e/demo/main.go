// Command demo runs, on this machine and on 127.0.0.1 only, the world README's walkthrough
// needs, and keeps it up until Ctrl-C (`make demo`, from the checkout's root):
//
//   - a real kube-apiserver and etcd (the e2e harness, e2e/kubeenv, with every CRD the project
//     knows), standing in for the host cluster and every tenant's cluster at once: one
//     kubeconfig context per cluster, all pointing at it;
//   - the real gateway, `inferplane xds serve --source kube` (the binary make build wrote),
//     watching that cluster's VMIs, with its own key secret and key store;
//   - TEST DOUBLES of what cannot run here: Envoy (e2e/envoystandin, in front of the gateway,
//     calling its real key check), Argo CD's sync and KubeVirt's controllers
//     (e2e/clusterdouble, following the tenants' repositories under out/), and the GPU VMs'
//     model servers (e2e/replicadouble).
//
// It writes .demo/env, the variables that point the inferplane commands at all of it (README:
// `. .demo/env`), and removes .demo when it stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/e2e/clusterdouble"
	"github.com/inferplane/inferplane/e2e/envoystandin"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/render"
)

type options struct {
	dir, inferplane, tenants, outDir, domain string
	step                                     time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", ".demo", "folder of the demo's kubeconfig, keys, logs and env file (removed when it stops)")
	flag.StringVar(&o.inferplane, "inferplane", "bin/inferplane", "the inferplane binary whose xds serve is the gateway")
	flag.StringVar(&o.tenants, "tenants", "tenants", "the tenants folder (a kubeconfig context per tenant's cluster)")
	flag.StringVar(&o.outDir, "out-dir", "out", "the tenants' repositories, which the stand-in for Argo CD follows")
	flag.StringVar(&o.domain, "domain", "models.example.com", "the endpoints' domain (never looked up: clients go through the gateway's address)")
	flag.DurationVar(&o.step, "step", time.Second, "how long each stage of a job takes (sync, boot, load)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// client-go's warnings (KubeVirt's older API versions) are not the reader's business.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	ctrllog.SetLogger(logr.Discard())
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	bin, err := filepath.Abs(o.inferplane)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: the gateway is its xds serve: run make build first", o.inferplane)
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: another demo runs from this folder (or one was killed: remove %s)", o.dir, o.dir)
		}
		return err
	}
	defer os.RemoveAll(dir)

	say("starting kube-apiserver and etcd (the e2e harness; the first start takes a while)")
	// The servers keep their data in the demo's folder, not in one named like the tests':
	// the tests' reaper would take them for a dead test's and kill them.
	env, err := kubeenv.StartWith(ctx, kubeenv.Options{WorkDir: filepath.Join(dir, "kube")})
	if err != nil {
		return err
	}
	defer env.Stop()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	contexts := map[string]*rest.Config{"host": env.Config}
	for _, c := range tenantClusters(o.tenants) {
		contexts[c] = env.Config
	}
	if err := kubeenv.WriteKubeconfig(kubeconfig, "host", contexts); err != nil {
		return err
	}
	secretFile, storeFile := filepath.Join(dir, "keys-secret"), filepath.Join(dir, "keys.db")
	secret, err := keys.NewSecret()
	if err != nil {
		return err
	}
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		return err
	}

	admin, grpcAddr := freePort(), freePort()
	say("starting the gateway: " + bin + " xds serve (log: " + filepath.Join(o.dir, "gateway.log") + ")")
	stopGateway, err := startGateway(ctx, bin, dir, o.domain, kubeconfig, admin, grpcAddr, secretFile, storeFile)
	if err != nil {
		return err
	}
	defer stopGateway()
	envoy, err := envoystandin.Listen("", envoystandin.Options{Admin: "http://" + admin, Authz: []string{grpcAddr}, ALS: grpcAddr, Node: "envoy-demo"})
	if err != nil {
		return err
	}
	defer envoy.Close()

	logFile, err := os.Create(filepath.Join(dir, "world.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	world := clusterdouble.New(clusterdouble.Options{Host: env.Client, Tenant: func(string) client.Client { return env.Client },
		OutDir: o.outDir, Step: o.step, Log: slog.New(slog.NewTextHandler(logFile, nil))})

	vars := [][2]string{
		{"KUBECONFIG", kubeconfig},
		{"INFERPLANE_SERVER", "http://" + admin},
		{"INFERPLANE_GATEWAY", envoy.URL()},
		{"INFERPLANE_DOMAIN", o.domain},
		{"INFERPLANE_KEYS_FILE", storeFile},
		{"INFERPLANE_KEYS_SECRET_FILE", secretFile},
	}
	var envText strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&envText, "export %s=%s\n", v[0], v[1])
	}
	// Written last, atomically: its existence says the demo is ready.
	if err := os.WriteFile(filepath.Join(dir, "env.tmp"), []byte(envText.String()), 0o600); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "env.tmp"), filepath.Join(dir, "env")); err != nil {
		return err
	}
	fmt.Printf(`demo: ready. In another shell, from this folder:

  . %s/env

%s
  kube-apiserver  %s (contexts %s: the host cluster and each tenant's, one API server)
  gateway         xds serve on %s (admin) and %s (ADS, key check)
  Envoy           stand-in on %s (no Envoy binary here)
  Argo CD, KubeVirt, GPU VMs: stand-ins that follow %s/<tenant> (log: %s/world.log)

Ctrl-C stops it all and removes %s.
`, o.dir, indent(envText.String()), env.Config.Host, strings.Join(sortedKeys(contexts), ", "), admin, grpcAddr, envoy.URL(),
		o.outDir, o.dir, o.dir)
	err = world.Run(ctx)
	fmt.Println("demo: stopping")
	return err
}

// startGateway runs `inferplane xds serve` on the demo's cluster until stop, and waits until it
// is ready.
func startGateway(ctx context.Context, bin, dir, domain, kubeconfig, admin, grpcAddr, secretFile, storeFile string) (stop func(), err error) {
	log, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "xds", "serve", "--source", "kube", "--kubeconfig", kubeconfig, "--context", "host",
		"--domain", domain, "--admin-address", admin, "--grpc-address", grpcAddr,
		"--keys-file", storeFile, "--secret-file", secretFile, "--probe-interval", "1s", "--probe-timeout", "500ms")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stopped by us, after the clients
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
	}
	deadline := time.After(2 * time.Minute)
	for {
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		select {
		case err := <-exited:
			log.Close()
			return nil, fmt.Errorf("the gateway stopped (%v): %s", err, tail(filepath.Join(dir, "gateway.log")))
		case <-deadline:
			stop()
			return nil, fmt.Errorf("the gateway was not ready after 2 minutes: %s", tail(filepath.Join(dir, "gateway.log")))
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tenantClusters are the Argo CD cluster names of the tenants of the tenants folder (each
// gets a context), or the folder names when the folder does not load.
func tenantClusters(dir string) []string {
	in, err := inputs.Load(os.DirFS(dir), dir)
	var out []string
	if err == nil {
		for _, t := range in.Tenants {
			out = append(out, render.Destination(t.Object.Name, &t.Object.Spec))
		}
		return out
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), inputs.TenantFile)); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// freePort is a free 127.0.0.1 port, as host:port.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func say(msg string) { fmt.Println("demo: " + msg) }

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ")
}

func sortedKeys(m map[string]*rest.Config) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
