// Command modelserverstandin is a STAND-IN for a model server (vLLM, Parakeet) under the
// inference agent, for tests: no GPU, model or VM runs here. It prints a transcript of the real
// server's lines (agent/serverlog/testdata: upstream's own format strings, see PROVENANCE.md)
// on stdout and stderr, paced by the timestamps in them, and serves the replica double's
// OpenAI-compatible API (e2e/replicadouble), whose GET /health answers 200 only once the
// transcript says the server is up. It can be told to crash, hang, print fast and print
// secrets, so the agent's restart, stop, rate limit and redaction are tested on a real process.
//
//	modelserverstandin --script vllm-serve.log --addr 127.0.0.1:8000 [--speed 100]
//	    [--exit-code 1 --exit-after 2s] [--hang] [--flood 10000 [--every 0]] [--print-secret]
//
// Arguments after the flags (vllm's "serve <model> ...") are taken and ignored, as the real
// server's command line is passed through unchanged.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/e2e/modelserverstandin/transcript"
	"github.com/inferplane/inferplane/e2e/replicadouble"
)

type options struct {
	script      string
	addr        string
	runtime     string
	speed       float64
	exitCode    int
	exitAfter   time.Duration
	hang        bool
	flood       int
	every       time.Duration
	printSecret bool
}

func main() {
	var o options
	flag.StringVar(&o.script, "script", "", "transcript to print (agent/serverlog/testdata)")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8000", "where to serve /health and the API")
	flag.StringVar(&o.runtime, "runtime", replicadouble.RuntimeVLLM, "vllm or parakeet: which server's API the double answers as")
	flag.Float64Var(&o.speed, "speed", 1, "pace the transcript's timestamps this many times faster; 0 prints at once")
	flag.IntVar(&o.exitCode, "exit-code", 0, "with --exit-after: exit with this status")
	flag.DurationVar(&o.exitAfter, "exit-after", 0, "exit (crash) this long after starting")
	flag.BoolVar(&o.hang, "hang", false, "ignore SIGTERM and never answer /health (a server stuck in its start-up)")
	flag.IntVar(&o.flood, "flood", 0, "first print this many numbered lines on stdout")
	flag.DurationVar(&o.every, "every", 0, "with --flood: the pause between two lines (0: as fast as possible)")
	flag.BoolVar(&o.printSecret, "print-secret", false, "print $HF_TOKEN and $STANDIN_SECRET as a careless server would")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "modelserverstandin:", err)
		os.Exit(2)
	}
}

// out writes to stdout and stderr unbuffered (a real server's lines reach its pipe as they
// are printed), one write per call, so that tests see the pieces a process writes.
var out = struct {
	sync.Mutex
	f [3]*os.File
}{f: [3]*os.File{nil, os.Stdout, os.Stderr}}

func write(stream int, s string) {
	out.Lock()
	defer out.Unlock()
	_, _ = out.f[stream].WriteString(s)
}

func run(o options) error {
	var steps []transcript.Step
	if o.script != "" {
		var err error
		if steps, err = transcript.Read(o.script); err != nil {
			return err
		}
	}
	double, err := replicadouble.Start(replicadouble.Options{Name: "standin", Addr: o.addr, Runtime: o.runtime})
	if err != nil {
		return err
	}
	defer double.Close()
	double.SetHealthy(false)

	sigs := make(chan os.Signal, 1)
	if o.hang {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	if o.exitAfter > 0 {
		time.AfterFunc(o.exitAfter, func() {
			write(2, fmt.Sprintf("modelserverstandin: crashing with exit status %d as told (--exit-after %s)\n", o.exitCode, o.exitAfter))
			os.Exit(o.exitCode)
		})
	}
	done := make(chan int, 1)
	go func() { done <- play(o, steps, double) }()
	select {
	case code := <-done:
		if code >= 0 {
			os.Exit(code)
		}
		<-sigs // the transcript ended with the server up (or stuck): run until told to stop
	case <-sigs:
	}
	// uvicorn's own shutdown lines (PROVENANCE.md).
	for _, l := range []string{"INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
		"INFO:     Application shutdown complete.", fmt.Sprintf("INFO:     Finished server process [%d]", os.Getpid())} {
		write(2, l+"\n")
	}
	return nil
}

// play prints the flood, the secrets and the transcript; it returns the exit status the
// transcript ends with, or -1 to keep running.
func play(o options, steps []transcript.Step, double *replicadouble.Double) int {
	for i := 1; i <= o.flood; i++ {
		write(1, fmt.Sprintf("standin line %d of %d\n", i, o.flood))
		if o.every > 0 {
			time.Sleep(o.every)
		}
	}
	if o.printSecret {
		printSecrets()
	}
	var last time.Time
	for _, s := range steps {
		switch s.Kind {
		case transcript.Write:
			if d := s.At.Sub(last); !s.At.IsZero() && !last.IsZero() && o.speed > 0 && d > 0 && d < 10*time.Minute {
				time.Sleep(time.Duration(float64(d) / o.speed))
			}
			if !s.At.IsZero() {
				last = s.At
			}
			write(s.Stream, s.Text)
		case transcript.Sleep:
			if o.speed > 0 {
				time.Sleep(time.Duration(float64(s.Pause) / o.speed))
			}
		case transcript.Healthy:
			double.SetHealthy(!o.hang)
		case transcript.Exit:
			return s.Code
		}
	}
	return -1
}

// printSecrets prints secrets as a careless server would: the token on a line of its own, in a
// header, and split across two writes inside a carriage-return progress line (a reader that
// redacted each piece as it arrived would miss it).
func printSecrets() {
	token, secret := os.Getenv("HF_TOKEN"), os.Getenv("STANDIN_SECRET")
	write(1, "HF_TOKEN="+token+"\n")
	write(1, "sending Authorization: Bearer "+token+" to https://huggingface.co/api/models\n")
	half := len(token) / 2
	write(2, "\rFetching 4 files:  25%|██▌       | 1/4 [00:01<00:03,  1.02s/it] token "+token[:half])
	time.Sleep(50 * time.Millisecond)
	write(2, token[half:]+"\rFetching 4 files:  50%|█████     | 2/4 [00:02<00:02,  1.01s/it]\n")
	if secret != "" {
		write(1, "config: {'wandb_key': '"+secret+"', 'note': 'ok'}\n")
	}
	write(1, strings.Repeat("-", 10)+" secrets printed\n")
}
