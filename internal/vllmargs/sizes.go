package vllmargs

import (
	"fmt"
	"strconv"
	"strings"
)

// vLLM's parallel-size flags (long forms).
const (
	TensorParallelSize   = "--tensor-parallel-size"
	PipelineParallelSize = "--pipeline-parallel-size"
	DataParallelSize     = "--data-parallel-size"
	// DataParallelSizeLocal is the data-parallel ranks one node runs under vLLM's
	// data-parallel launcher (a multi-node replica whose nodes each start their own ranks).
	DataParallelSizeLocal = "--data-parallel-size-local"
)

// parallelFlags maps every spelling of a parallel-size flag to its long form.
var parallelFlags = map[string]string{
	TensorParallelSize: TensorParallelSize, "-tp": TensorParallelSize,
	PipelineParallelSize: PipelineParallelSize, "-pp": PipelineParallelSize,
	DataParallelSize: DataParallelSize, "-dp": DataParallelSize,
	DataParallelSizeLocal: DataParallelSizeLocal, "-dpl": DataParallelSizeLocal,
}

// ParallelFlag is the long form of a parallel-size flag token ("-tp", "--tensor-parallel-size=4"),
// or "" when tok is none.
func ParallelFlag(tok string) string {
	name, _, _ := strings.Cut(tok, "=")
	return parallelFlags[name]
}

// Sizes are the parallel sizes a command line asks for; 0 means not set.
type Sizes struct{ TP, PP, DP, DPLocal int64 }

// BadSize is a parallel-size flag whose value is not a positive whole number.
type BadSize struct{ Flag, Value string }

// ParseSizes reads the last value of each parallel-size flag in args (long and short forms,
// "--flag N" and "--flag=N"). A value that is not a positive whole number leaves the size
// unset and is returned in bad.
func ParseSizes(args []string) (s Sizes, bad []BadSize) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		flag, ok := parallelFlags[name]
		if !ok {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				bad = append(bad, BadSize{name, "(no value)"})
				continue
			}
			i++
			value = args[i]
		}
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil || n < 1 {
			bad = append(bad, BadSize{name, value})
			continue
		}
		switch flag {
		case TensorParallelSize:
			s.TP = n
		case PipelineParallelSize:
			s.PP = n
		case DataParallelSize:
			s.DP = n
		case DataParallelSizeLocal:
			s.DPLocal = n
		}
	}
	return s, bad
}

// Set reports whether any of tensor, pipeline or data parallel size is set.
func (s Sizes) Set() bool { return s.TP > 0 || s.PP > 0 || s.DP > 0 }

// GPUs multiplies the sizes that are set; ok is false once the product exceeds limit (it never
// overflows).
func (s Sizes) GPUs(limit int64) (n int64, ok bool) {
	n = 1
	for _, v := range []int64{s.TP, s.PP, s.DP} {
		if v > 0 {
			n *= v
			if n > limit {
				return n, false
			}
		}
	}
	return n, true
}

// Describe says how the sizes multiply: "tensor 4 x pipeline 2 = 8" (" x data N" when set).
func (s Sizes) Describe() string {
	out := fmt.Sprintf("tensor %d x pipeline %d", max(s.TP, 1), max(s.PP, 1))
	if s.DP > 0 {
		out += fmt.Sprintf(" x data %d", s.DP)
	}
	if g, ok := s.GPUs(1 << 40); ok {
		out += fmt.Sprintf(" = %d", g)
	}
	return out
}

// Override returns s with the sizes q sets in place of s's (vLLM: the last flag wins).
func (s Sizes) Override(q Sizes) Sizes {
	if q.TP > 0 {
		s.TP = q.TP
	}
	if q.PP > 0 {
		s.PP = q.PP
	}
	if q.DP > 0 {
		s.DP = q.DP
	}
	if q.DPLocal > 0 {
		s.DPLocal = q.DPLocal
	}
	return s
}
