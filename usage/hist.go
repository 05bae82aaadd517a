package usage

import (
	"math/bits"
	"slices"
	"time"
)

// hist is a sparse log-linear latency histogram in microseconds: exact below 64 us, then 32
// buckets per power of two (at most 1.6% off at the bucket's middle). Sparse because one
// endpoint's latencies fall in a few dozen buckets, and there may be thousands of endpoints.
type hist map[uint16]uint32

const maxHistIndex = 64 + (40-7)*32 + 31 // 2^40 us is 12 days: more than any request

func histIndex(d time.Duration) uint16 {
	us := uint64(max(d.Microseconds(), 0))
	if us < 64 {
		return uint16(us)
	}
	e := bits.Len64(us) // us is in [2^(e-1), 2^e), e >= 7
	if e > 40 {
		return maxHistIndex
	}
	sub := (us >> (e - 6)) & 31
	return uint16(64 + (e-7)*32 + int(sub))
}

// histValue is the middle of bucket i.
func histValue(i uint16) time.Duration {
	if i < 64 {
		return time.Duration(i) * time.Microsecond
	}
	k := int(i) - 64
	e, sub := k/32+7, uint64(k%32)
	lower := (32 + sub) << (e - 6)
	width := uint64(1) << (e - 6)
	return time.Duration(lower+width/2) * time.Microsecond
}

func (h hist) add(d time.Duration) { h[histIndex(d)]++ }

// quantiles returns the values at each q (0..1) over the merged histograms, or nil when
// they hold nothing.
func quantiles(hs []hist, qs ...float64) []time.Duration {
	merged := map[uint16]uint64{}
	var n uint64
	for _, h := range hs {
		for i, c := range h {
			merged[i] += uint64(c)
			n += uint64(c)
		}
	}
	if n == 0 {
		return nil
	}
	idx := make([]uint16, 0, len(merged))
	for i := range merged {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	out := make([]time.Duration, len(qs))
	for qi, q := range qs {
		// the rank of the q-quantile, 1-based: the smallest value with at least q*n at or below
		rank := uint64(q*float64(n) + 0.999999)
		rank = min(max(rank, 1), n)
		var seen uint64
		for _, i := range idx {
			seen += merged[i]
			if seen >= rank {
				out[qi] = histValue(i)
				break
			}
		}
	}
	return out
}
