// Command demo runs, on this machine and on 127.0.0.1 only, the world README's walkthrough
// needs, and keeps it up until Ctrl-C (`make demo`, from the checkout's root):
//
//   - a real kube-apiserver and etcd (the e2e harness, e2e/kubeenv, with every CRD the project
//     knows), standing in for the host cluster and every tenant's cluster at once: one
//     kubeconfig context per cluster, all pointing at it;
//   - the real gateway, `inferplane xds serve --source kube` (the binary make build wrote),
//     watching that cluster's VMIs, with its own key secret and key store;
//   - the real product API, `inferplane api serve`, over a bare inputs repository seeded from
//     the checkout's recipes/ and tenants/, reading that cluster (the tenants' clusters through
//     Argo CD cluster Secrets, as in production), minting keys into the gateway's key store,
//     with its web console at / (its playground through the stand-in for Envoy); customers
//     sign in to both at a real Dex (built from hack/gitopstools) as a demo user;
//   - TEST DOUBLES of what cannot run here: Envoy (e2e/envoystandin, in front of the gateway,
//     calling its real key check), Argo CD's sync and KubeVirt's controllers
//     (e2e/clusterdouble, following the tenants' repositories the API writes), and the GPU
//     VMs' model servers (e2e/replicadouble).
//
// It writes .demo/customer.env, what a customer's shell needs (the API's address to sign in
// to, the gateway's address, a CLI configuration folder inside .demo), and .demo/env, the
// operator's (kubeconfig, the gateway's admin address, the key store), and removes .demo when
// it stops.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferplane/inferplane/auth/keys"
	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/clusterdouble"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/envoystandin"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/toolbin"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

type options struct {
	dir, inferplane, recipes, tenants, domain string
	step                                      time.Duration
}

// customer is the demo's user at Dex: group acme-ml is developer in acme (tenants/acme/tenant.yaml).
var customer = dex.User{Email: "dana@acme.example", Name: "dana", Groups: []string{"acme-ml"}}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", ".demo", "folder of the demo's kubeconfig, keys, logs and env file (removed when it stops)")
	flag.StringVar(&o.inferplane, "inferplane", "bin/inferplane", "the inferplane binary whose xds serve is the gateway")
	flag.StringVar(&o.recipes, "recipes", "recipes", "the recipes folder, committed to the product API's inputs repository")
	flag.StringVar(&o.tenants, "tenants", "tenants", "the tenants folder, committed to the product API's inputs repository (and a kubeconfig context per tenant's cluster)")
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
		return fmt.Errorf("%s: the gateway and the product API are its xds serve and api serve: run make build first", o.inferplane)
	}
	dexDir, err := toolbin.Dir(dex.Tool)
	if err != nil {
		return err
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
	kubeconfig, err := clusters(ctx, env, dir, tenantClusters(o.tenants))
	if err != nil {
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
	stopGateway, err := startServer(ctx, dir, "gateway", "http://"+admin+"/readyz", bin, "xds", "serve", "--source", "kube",
		"--kubeconfig", kubeconfig, "--context", "host", "--domain", o.domain, "--admin-address", admin, "--grpc-address", grpcAddr,
		"--keys-file", storeFile, "--secret-file", secretFile, "--probe-interval", "1s", "--probe-timeout", "500ms")
	if err != nil {
		return err
	}
	defer stopGateway()
	envoy, err := envoystandin.Listen("", envoystandin.Options{Admin: "http://" + admin, Authz: []string{grpcAddr}, ALS: grpcAddr, Node: "envoy-demo"})
	if err != nil {
		return err
	}
	defer envoy.Close()

	say("starting Dex, the identity provider customers sign in at")
	password := randomHex(6)
	u := customer
	u.Password = password
	// At the root of its address: Dex at this pin refuses the device flow's callback under a path.
	idp, err := dex.StartIn(filepath.Join(dexDir, dex.Tool), mkdir(dir, "dex"), dex.Options{
		Clients: []dex.Client{{ID: "inferplane", Public: true}}, Users: []dex.User{u}, RootIssuer: true, Sessions: true})
	if err != nil {
		return err
	}
	defer idp.Stop()
	inputs, err := seedInputs(dir, o.recipes, o.tenants)
	if err != nil {
		return err
	}
	work := filepath.Join(dir, "tenants")
	api := freePort()
	say("starting the product API: " + bin + " api serve (log: " + filepath.Join(o.dir, "api.log") + ")")
	stopAPI, err := startServer(ctx, dir, "api", "http://"+api+"/readyz", bin, "api", "serve", "--listen", api,
		"--oidc-issuer", idp.Issuer, "--oidc-client-id", "inferplane", "--inputs-repo", inputs, "--work-dir", work,
		"--kubeconfig", kubeconfig, "--context", "host", "--keys-file", storeFile, "--keys-secret-file", secretFile,
		"--server", "http://"+admin, "--domain", o.domain,
		// The web console at the API's address: the same Dex client (public, so Dex lets it
		// come back to any 127.0.0.1 port), its playground through the stand-in for Envoy.
		"--console-gateway", envoy.URL())
	if err != nil {
		return err
	}
	defer stopAPI()
	return serve(ctx, o, dir, work, env, demoVars{kubeconfig: kubeconfig, admin: admin, grpc: grpcAddr, envoy: envoy.URL(),
		api: api, issuer: idp.Issuer, password: password, store: storeFile, secret: secretFile})
}

// demoVars are the addresses and files the env files and the ready message name.
type demoVars struct {
	kubeconfig, admin, grpc, envoy, api, issuer, password, store, secret string
}

// serve writes the env files, says the demo is ready and runs the stand-ins for Argo CD and
// KubeVirt until ctx ends.
func serve(ctx context.Context, o options, dir, work string, env *kubeenv.Env, v demoVars) error {
	logFile, err := os.Create(filepath.Join(dir, "world.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	world := clusterdouble.New(clusterdouble.Options{Host: env.Client, Tenant: func(string) client.Client { return env.Client },
		OutDir: work, Step: o.step, Log: slog.New(slog.NewTextHandler(logFile, nil))})
	operator := [][2]string{
		{"KUBECONFIG", v.kubeconfig},
		{"INFERPLANE_SERVER", "http://" + v.admin},
		{"INFERPLANE_GATEWAY", v.envoy},
		{"INFERPLANE_DOMAIN", o.domain},
		{"INFERPLANE_KEYS_FILE", v.store},
		{"INFERPLANE_KEYS_SECRET_FILE", v.secret},
	}
	customerVars := [][2]string{
		{"INFERPLANE_API", "http://" + v.api},
		{"INFERPLANE_GATEWAY", v.envoy},
		{clientconfig.EnvDir, filepath.Join(dir, "config")},
	}
	// customer.env is written last, atomically: its existence says the demo is ready.
	if err := writeEnv(filepath.Join(dir, "env"), operator); err != nil {
		return err
	}
	if err := writeEnv(filepath.Join(dir, "customer.env"), customerVars); err != nil {
		return err
	}
	fmt.Printf(`demo: ready. In another shell, from this folder, a customer:

  . %s/customer.env
  inferplane login "$INFERPLANE_API"

signs in at Dex as %s, password %s (group %s: developer in acme).
The web console is at http://%s/ (the same sign-in).
The operator's variables (kubeconfig, the gateway's admin address, the key store) are in %s/env.

  product API     api serve on http://%s (inputs: %s/inputs.git; the tenants' repositories: %s/tenants)
  Dex             %s
  kube-apiserver  %s (contexts host and each tenant's: one API server)
  gateway         xds serve on %s (admin) and %s (ADS, key check)
  Envoy           stand-in on %s (no Envoy binary here)
  Argo CD, KubeVirt, GPU VMs: stand-ins that follow %s/tenants/<tenant> (log: %s/world.log)

Ctrl-C stops it all and removes %s.
`, o.dir, customer.Email, v.password, strings.Join(customer.Groups, ","), v.api, o.dir, v.api, o.dir, o.dir, v.issuer,
		env.Config.Host, v.admin, v.grpc, v.envoy, o.dir, o.dir, o.dir)
	err = world.Run(ctx)
	fmt.Println("demo: stopping")
	return err
}

// clusters writes the demo's kubeconfig (a context for the host and one per tenant cluster,
// all the one API server) and registers each tenant cluster with its Argo CD cluster Secret,
// where the product API finds it.
func clusters(ctx context.Context, env *kubeenv.Env, dir string, tenants []string) (string, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	contexts := map[string]*rest.Config{"host": env.Config}
	if err := env.EnsureNamespace(ctx, registry.ArgoCDNamespace); err != nil {
		return "", err
	}
	for _, c := range tenants {
		contexts[c] = env.Config
		s, err := argocd.ClusterSecret(registry.ArgoCDNamespace, c, env.Config)
		if err != nil {
			return "", err
		}
		if err := env.Client.Create(ctx, s); err != nil {
			return "", fmt.Errorf("register tenant cluster %s: %w", c, err)
		}
	}
	return kubeconfig, kubeenv.WriteKubeconfig(kubeconfig, "host", contexts)
}

// seedInputs commits the recipes and tenants folders to a new bare repository in dir, the
// product API's inputs, and returns its file:// URL.
func seedInputs(dir, recipes, tenants string) (string, error) {
	bare, seed := filepath.Join(dir, "inputs.git"), filepath.Join(dir, "inputs-seed")
	defer os.RemoveAll(seed)
	for _, c := range [][2]string{{"recipes", recipes}, {"tenants", tenants}} {
		if err := os.CopyFS(filepath.Join(seed, c[0]), os.DirFS(c[1])); err != nil {
			return "", fmt.Errorf("copy %s into the inputs: %w", c[1], err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"-C", seed, "init", "-q", "-b", "main"},
		{"-C", seed, "add", "-A"},
		{"-C", seed, "-c", "user.name=inferplane demo", "-c", "user.email=demo@127.0.0.1", "commit", "-q", "-m", "the checkout's recipes and tenants"},
		{"-C", seed, "push", "-q", bare, "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return "file://" + bare, nil
}

// startServer runs bin with args (its log in dir/<name>.log) until stop, and waits until ready
// answers 200.
func startServer(ctx context.Context, dir, name, ready, bin string, args ...string) (stop func(), err error) {
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
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
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		select {
		case err := <-exited:
			log.Close()
			return nil, fmt.Errorf("the %s stopped (%v): %s", name, err, tail(logPath))
		case <-deadline:
			stop()
			return nil, fmt.Errorf("the %s was not ready after 2 minutes: %s", name, tail(logPath))
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeEnv writes export lines, atomically.
func writeEnv(path string, vars [][2]string) error {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s=%s\n", v[0], v[1])
	}
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func mkdir(dir, name string) string {
	p := filepath.Join(dir, name)
	_ = os.MkdirAll(p, 0o700)
	return p
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
