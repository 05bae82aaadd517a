package vllmargs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferplane/inferplane/internal/vllmargs"
)

func TestMerge(t *testing.T) {
	tests := []struct {
		name string
		in   [][]string
		want []string
	}{
		{"nothing", nil, []string{}},
		{"no repeats keep their order", [][]string{{"--a", "1", "--b"}, {"--c", "x"}}, []string{"--a", "1", "--b", "--c", "x"}},
		{"a later value wins, in the later position", [][]string{{"--tp", "1", "--x"}, {"--tp", "8"}}, []string{"--x", "--tp", "8"}},
		{"--flag=value and --flag value are one flag", [][]string{{"--block-size=16", "--y"}, {"--block-size", "64"}}, []string{"--y", "--block-size", "64"}},
		{"and the other way round", [][]string{{"--block-size", "16"}, {"--block-size=64"}}, []string{"--block-size=64"}},
		{"a boolean repeated", [][]string{{"--trust-remote-code", "--enforce-eager"}, {"--trust-remote-code"}}, []string{"--enforce-eager", "--trust-remote-code"}},
		{"a boolean then a valued form", [][]string{{"--enable-x"}, {"--enable-x", "false"}}, []string{"--enable-x", "false"}},
		{"single-dash config flags", [][]string{{"-cc.pass_config.fuse_allreduce_rms=False"}, {"-cc.pass_config.fuse_allreduce_rms=True", "-cc.other=1"}}, []string{"-cc.pass_config.fuse_allreduce_rms=True", "-cc.other=1"}},
		{"a negative number is a value", [][]string{{"--seed", "-1"}, {"--seed", "-2"}}, []string{"--seed", "-2"}},
		{"JSON values stay whole", [][]string{{"--speculative-config", `{"a":1}`}}, []string{"--speculative-config", `{"a":1}`}},
		{"positional tokens are kept", [][]string{{"model", "--x", "1"}, {"--x", "2"}}, []string{"model", "--x", "2"}},
		{"a lone dash is positional", [][]string{{"-", "-"}}, []string{"-", "-"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, vllmargs.Merge(tc.in...))
		})
	}
}

func TestValue(t *testing.T) {
	args := []string{"--tool-call-parser", "hermes", "--reasoning-parser=qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "pythonic"}
	v, ok := vllmargs.Value(args, "--tool-call-parser")
	assert.True(t, ok)
	assert.Equal(t, "pythonic", v, "the last occurrence counts")
	v, ok = vllmargs.Value(args, "--reasoning-parser")
	assert.True(t, ok)
	assert.Equal(t, "qwen3", v)
	_, ok = vllmargs.Value(args, "--enable-auto-tool-choice")
	assert.False(t, ok, "a boolean flag has no value")
	_, ok = vllmargs.Value(args, "--chat-template")
	assert.False(t, ok)
}
