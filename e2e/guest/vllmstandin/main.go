// Command vllmstandin is a STAND-IN for vLLM's `vllm serve` inside the boot test's guest (no
// GPU, model or network to download one): the entrypoint of a tiny image the test builds and
// seeds into the guest's Docker. It takes vLLM's command line (serve MODEL [flags]) as the
// rendered launcher passes it, prints lines in vLLM's own format, and serves the replica
// double's OpenAI-compatible API (e2e/replicadouble) on 0.0.0.0:8000, whose GET /health the
// gateway's prober reaches through the VM's port forward.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/e2e/replicadouble"
)

func main() {
	if len(os.Args) < 3 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: vllm serve MODEL [flags]")
		os.Exit(2)
	}
	model := os.Args[2]
	say := func(format string, a ...any) {
		fmt.Printf("INFO %s [api_server.py:1] "+format+"\n", append([]any{time.Now().Format("01-02 15:04:05")}, a...)...)
	}
	say("vLLM API server version 0.27.1 (stand-in)")
	say("args: %q", os.Args[3:])
	_, token := os.LookupEnv("HF_TOKEN")
	say("HF_TOKEN set: %v", token)
	host, _ := os.Hostname()
	d, err := replicadouble.Start(replicadouble.Options{Name: host, Model: model, Addr: "0.0.0.0:8000", Runtime: replicadouble.RuntimeVLLM})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	say("Starting vLLM API server 0 on http://%s", d.Addr())
	say("Application startup complete.")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	say("Shutting down")
}
