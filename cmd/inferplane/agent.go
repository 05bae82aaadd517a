package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/agent"
	"github.com/inferplane/inferplane/agent/redact"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/agent/runtime/docker"
	"github.com/inferplane/inferplane/agent/runtime/process"
)

// Where the agent's files are in the guest (docs/agent.md).
const (
	agentConsole     = "/dev/ttyS0"
	agentStateDir    = "/var/lib/inferplane/agent"
	agentHFTokenFile = "/run/inferplane/hf-token/token"
	agentContainer   = "inferplane-model-server"
)

type agentFlags struct {
	cfg                  agent.Config
	engine, dockerHost   string
	allGPUs              bool
	console, hfTokenFile string
	env, secretEnv       []string
	entrypoint           string
	restartBackoff       time.Duration
}

func newAgentCmd() *cobra.Command {
	f := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "agent [flags] IMAGE [ARG...]",
		Short: "Run the model server in the guest VM: restart it, stop it gracefully, forward its lines to the serial console",
		Long: `agent is the inference agent of a replica's VM (docs/agent.md). It runs the model server's
container, IMAGE with ARGs, as "docker run" would with the flags of the same names (--all-gpus
for --gpus all, --host-device for --device), and:

  - restarts it when it exits, after a backoff that doubles from --restart-backoff up to
    --restart-backoff-max and starts again once the server has served for --healthy-period;
  - stops it on SIGTERM: SIGTERM to the server, SIGKILL after --stop-grace;
  - reads every line it prints (stdout and stderr), redacts secrets (the Hugging Face token of
    $HF_TOKEN and --hf-token-file, the --secret-env values, anything shaped like a token or a
    key), and writes it with the stage it sees the server in (pulling-image,
    downloading-weights, loading-model, serving: /health answers, crash-looping) to --console,
    the guest's serial console, one record per line (agent/guestlog), at most --console-rate
    bytes a second: lines over it are dropped and counted.

Its state (the records' sequence number, where it is in the server's output) survives its
restarts in --state-dir: restarted while the container still runs, it reattaches to it and
goes on from where it stopped, with no line twice.

Flags end at IMAGE: every word after it goes to the server unchanged.`,
		Example: `  # In the guest, as the launcher runs it: vLLM on every GPU of the VM
  inferplane agent --all-gpus --ipc host --network host \
    --volume /var/lib/inferplane/model-cache:/root/.cache/huggingface --env HF_TOKEN \
    --entrypoint vllm vllm/vllm-openai:latest serve Qwen/Qwen3-32B --tensor-parallel-size 1

  # A worker of a multi-node replica serves no HTTP: no health check
  inferplane agent --health-url '' --all-gpus --network host --entrypoint vllm vllm/vllm-openai:latest \
    serve moonshotai/Kimi-K2-Instruct --nnodes 2 --node-rank 1 --headless

  # A plain process instead of a container, its records in a file
  inferplane agent --engine process --console agent.log --state-dir /tmp/agent ./server --port 8000`,
		Args:        cobra.MinimumNArgs(1),
		Annotations: map[string]string{flagsEndAtFirstArg: ""},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAgent(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // IMAGE ends the flags: the server's own flags follow it
	fl.StringVar(&f.cfg.Spec.Name, "name", agentContainer, "name of the model server's container")
	fl.StringVar(&f.engine, "engine", "docker", "what runs the server: docker (the Docker Engine API at --docker-host) or process (IMAGE is a program to run)")
	fl.StringVar(&f.dockerHost, "docker-host", docker.DefaultHost, "the Docker daemon's socket")
	fl.StringVar(&f.entrypoint, "entrypoint", "", "the container's entrypoint instead of the image's (as docker run --entrypoint)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE in the server's environment, or KEY for the agent's own value (as docker run --env)")
	fl.StringArrayVar(&f.secretEnv, "secret-env", nil, "KEY=FILE: KEY in the server's environment, its value read from FILE; redacted in every line")
	fl.StringArrayVarP(&f.cfg.Spec.Binds, "volume", "v", nil, "HOST:CONTAINER[:ro] bind mount")
	fl.BoolVar(&f.allGPUs, "all-gpus", false, "give the container every GPU of the VM (docker run --gpus all)")
	fl.StringVar(&f.cfg.Spec.IPC, "ipc", "", "IPC namespace: host")
	fl.StringVar(&f.cfg.Spec.Network, "network", "", "network: host")
	fl.StringArrayVar(&f.cfg.Spec.Devices, "host-device", nil, "HOST[:CONTAINER[:PERMISSIONS]]: a device of the VM in the container (docker run --device)")
	fl.StringArrayVar(&f.cfg.Spec.CapAdd, "cap-add", nil, "Linux capability to add (IPC_LOCK)")
	fl.StringArrayVar(&f.cfg.Spec.Ulimits, "ulimit", nil, "NAME=SOFT[:HARD] (memlock=-1)")
	fl.StringVar(&f.cfg.HealthURL, "health-url", "http://127.0.0.1:8000/health", "the server's health check; '' on a node that serves no HTTP")
	fl.StringVar(&f.hfTokenFile, "hf-token-file", agentHFTokenFile, "the Hugging Face token's file, if any, whose value is redacted")
	fl.StringVar(&f.console, "console", agentConsole, "where the records go: the serial console's device (a file, to test)")
	fl.StringVar(&f.cfg.StateDir, "state-dir", agentStateDir, "the agent's state across its restarts")
	fl.DurationVar(&f.cfg.StopGrace, "stop-grace", agent.DefaultStopGrace, "from SIGTERM to SIGKILL when the server is stopped")
	fl.DurationVar(&f.restartBackoff, "restart-backoff", agent.DefaultBackoffInitial, "wait before the first restart after an exit")
	fl.DurationVar(&f.cfg.BackoffMax, "restart-backoff-max", agent.DefaultBackoffMax, "the longest wait before a restart")
	fl.DurationVar(&f.cfg.HealthyPeriod, "healthy-period", agent.DefaultHealthyPeriod, "a run that served this long starts the backoff again")
	fl.DurationVar(&f.cfg.HealthInterval, "health-interval", agent.DefaultHealthInterval, "between two health checks while the server starts (5 times that once it serves)")
	fl.IntVar(&f.cfg.ConsoleRate, "console-rate", agent.DefaultConsoleRate, "bytes a second written to the console at most")
	return cmd
}

func runAgent(cmd *cobra.Command, f *agentFlags, args []string) error {
	cfg := f.cfg
	cfg.Spec.Image, cfg.Spec.Args = args[0], args[1:]
	cfg.BackoffInitial = f.restartBackoff
	if f.entrypoint != "" {
		cfg.Spec.Entrypoint = []string{f.entrypoint}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--stop-grace", cfg.StopGrace}, {"--restart-backoff", cfg.BackoffInitial}, {"--restart-backoff-max", cfg.BackoffMax},
		{"--healthy-period", cfg.HealthyPeriod}, {"--health-interval", cfg.HealthInterval}} {
		if d.v <= 0 {
			return usageErr(fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if cfg.ConsoleRate < 1 {
		return usageErr(fmt.Errorf("--console-rate %d: want at least 1 byte a second", cfg.ConsoleRate))
	}
	if f.allGPUs {
		cfg.Spec.GPUs = "all"
	}
	var err error
	switch f.engine {
	case "docker":
		if cfg.Runtime, err = docker.New(f.dockerHost); err != nil {
			return usageErr(err)
		}
	case "process":
		cfg.Runtime = process.Runtime{}
	default:
		return usageErr(fmt.Errorf("--engine %q: expected docker or process", f.engine))
	}
	secrets, notes, err := agentEnv(&cfg.Spec, f)
	if err != nil {
		return usageErr(err)
	}
	cfg.Redactor = redact.New(secrets...)
	console, err := os.OpenFile(f.console, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOCTTY, 0o600)
	if err != nil {
		return fmt.Errorf("the console: %w", err)
	}
	defer console.Close()
	cfg.Console = console
	stderr := cmd.ErrOrStderr()
	cfg.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	cfg.Notes = notes
	return agent.Run(cmd.Context(), cfg)
}

// agentEnv builds the server's environment from --env and --secret-env, and returns the
// values to redact: $HF_TOKEN, the token file's, the secret files'. A secret file that
// cannot be read is left out with a note (as the launcher leaves the optional token out).
func agentEnv(spec *runtime.Spec, f *agentFlags) (secrets, notes []string, err error) {
	for _, e := range f.env {
		k, v, ok := strings.Cut(e, "=")
		if k == "" {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE or KEY", e)
		}
		if !ok {
			if v, ok = os.LookupEnv(k); !ok {
				continue // as docker run --env KEY: unset stays unset
			}
		}
		spec.Env = append(spec.Env, k+"="+v)
	}
	for _, e := range f.secretEnv {
		k, file, ok := strings.Cut(e, "=")
		if k == "" || !ok || file == "" {
			return nil, nil, fmt.Errorf("--secret-env %q: want KEY=FILE", e)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s is not set: its secret file %s cannot be read (%v)", k, file, err))
			continue
		}
		v := strings.TrimRight(string(b), "\r\n")
		spec.Env = append(spec.Env, k+"="+v)
		secrets = append(secrets, v)
	}
	secrets = append(secrets, os.Getenv("HF_TOKEN"))
	if b, err := os.ReadFile(f.hfTokenFile); err == nil {
		secrets = append(secrets, string(b))
	}
	return slices.DeleteFunc(secrets, func(s string) bool { return s == "" }), notes, nil
}
