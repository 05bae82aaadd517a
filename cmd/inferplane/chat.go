package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/inferplane/inferplane/endpoint"
)

// endpointFlags choose the endpoint a customer command calls and the key it sends.
type endpointFlags struct {
	keyFile string
	domain  string
	gateway string
	model   string
}

func (f *endpointFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.keyFile, "api-key-file", "", "file holding the API key (default: $"+endpoint.EnvAPIKey+"; never pass a key as a flag)")
	addDomainFlag(fs, &f.domain, false)
	fs.StringVar(&f.gateway, "gateway", os.Getenv(endpoint.EnvGateway),
		"connect to this URL instead of the endpoint's host name, still sending that name ($"+endpoint.EnvGateway+")")
	fs.StringVar(&f.model, "model", "", "the model to ask (default: the first the endpoint lists at /v1/models)")
}

// connection is an endpoint ready to call: its client, target, key and model.
type connection struct {
	c     openai.Client
	t     endpoint.Target
	key   string
	model string
}

// connect resolves the endpoint argument, reads the key and picks the model: --model, else
// the first the endpoint lists at /v1/models.
func (f *endpointFlags) connect(ctx context.Context, arg string) (*connection, error) {
	t, err := endpoint.Resolve(arg, f.domain, f.gateway)
	if err != nil {
		return nil, usageErr(err)
	}
	key, err := endpoint.Key(f.keyFile)
	if err != nil {
		return nil, err
	}
	cn := &connection{c: endpoint.Client(t, key), t: t, key: key, model: f.model}
	if cn.model != "" {
		return cn, nil
	}
	page, err := cn.c.Models.List(ctx)
	if err != nil {
		return nil, cn.explain(err)
	}
	if len(page.Data) == 0 {
		return nil, fmt.Errorf("%s: the endpoint lists no model at /v1/models: pass --model", t.Name())
	}
	cn.model = page.Data[0].ID
	return cn, nil
}

func (cn *connection) explain(err error) error { return endpoint.Explain(err, cn.t, cn.key) }

func newChatCmd() *cobra.Command {
	var (
		ef        endpointFlags
		stream    bool
		maxTokens int64
		system    string
	)
	cmd := &cobra.Command{
		Use:   "chat <endpoint> [prompt]",
		Short: "Send a chat prompt to a job's endpoint and print the answer as it arrives",
		Long: `chat sends one chat completion request to a vLLM job's endpoint with the official
OpenAI client and prints the answer, token by token as the server streams it (--stream=false
prints it whole). The prompt is the arguments after the endpoint, or standard input (typed on a
terminal: end it with Ctrl-D).

The endpoint is a URL (https://chat.acme.models.example.com), a host name, or <job>.<tenant>
with --domain or $` + endpoint.EnvDomain + `. The API key comes from $` + endpoint.EnvAPIKey + ` or --api-key-file,
never from a flag (a flag's value stays in the shell's history). 401, 403, 404, 429 and 503
answers and network failures are explained.`,
		Example: `  export INFERPLANE_DOMAIN=models.example.com INFERPLANE_API_KEY=ipk_...
  inferplane chat chat.acme "Write a haiku about GPUs"
  echo "Summarise this" | inferplane chat https://chat.acme.models.example.com --max-tokens 200
  inferplane chat chat.acme --system "Answer in French" --api-key-file ~/.config/acme.key "Hello"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt, err := promptOf(cmd, args[1:])
			if err != nil {
				return err
			}
			cn, err := ef.connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			params := openai.ChatCompletionNewParams{Model: cn.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
			if system != "" {
				params.Messages = append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}, params.Messages...)
			}
			if maxTokens > 0 {
				params.MaxTokens = openai.Int(maxTokens)
			}
			if err := chat(cmd.Context(), cmd.OutOrStdout(), cn.c, params, stream); err != nil {
				return cn.explain(err)
			}
			return nil
		},
	}
	ef.register(cmd.Flags())
	cmd.Flags().BoolVar(&stream, "stream", true, "print tokens as they arrive")
	cmd.Flags().Int64Var(&maxTokens, "max-tokens", 0, "cap on the answer's tokens (default: the server's)")
	cmd.Flags().StringVar(&system, "system", "", "a system message before the prompt")
	return cmd
}

// promptOf is the arguments, or standard input when there are none; on a terminal it first
// says how to end the prompt, since nothing else would show that chat is waiting for it.
func promptOf(cmd *cobra.Command, args []string) (string, error) {
	prompt := strings.Join(args, " ")
	if prompt == "" {
		if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			fmt.Fprintln(cmd.ErrOrStderr(), "type a prompt, end with Ctrl-D (Ctrl-C cancels):")
		}
		b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 16<<20))
		if err != nil {
			return "", fmt.Errorf("read the prompt from stdin: %w", err)
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		return "", usageErr(errors.New("no prompt: give it after the endpoint or on stdin"))
	}
	return prompt, nil
}

// chat writes the answer to out: each streamed piece as soon as it arrives.
func chat(ctx context.Context, out io.Writer, c openai.Client, params openai.ChatCompletionNewParams, stream bool) error {
	if !stream {
		resp, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			return err
		}
		if len(resp.Choices) > 0 {
			fmt.Fprintln(out, resp.Choices[0].Message.Content)
		}
		return nil
	}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	for s.Next() {
		for _, ch := range s.Current().Choices {
			if ch.Delta.Content != "" {
				if _, err := io.WriteString(out, ch.Delta.Content); err != nil {
					return err
				}
			}
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out)
	return err
}
