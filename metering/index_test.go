package metering

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestIndexQuery(t *testing.T) {
	x := NewIndex()
	chat := Labels{Tenant: "acme", Tier: "h100-dedicated", Job: "chat", Model: "Qwen/Qwen3-32B", NodeType: "metal3.gpu-h100"}
	big := Labels{Tenant: "acme", Tier: "h100-dedicated", Job: "big", Model: "moonshotai/Kimi-K2-Instruct", NodeType: "metal3.gpu-h200"}
	key := chat
	key.Key = "0123456789abcdef"
	// Out of order on purpose: a meter that was down writes an older hour after a newer one.
	x.Add(
		GPUEvent("", "a", chat, 2, at(25*time.Hour), at(26*time.Hour)),
		GPUEvent("", "a", chat, 2, at(time.Hour), at(time.Hour+30*time.Minute)),
		GPUEvent("", "b", big, 16, at(time.Hour), at(2*time.Hour)),
		GPUEvent("", "c", chat, 2, at(time.Hour+30*time.Minute), at(2*time.Hour)),
		TokenEvent("", key, at(time.Hour), 3, 100, 200),
		GPUEvent("", "z", Labels{Tenant: "globex", Job: "chat"}, 8, at(time.Hour), at(2*time.Hour)),
	)
	open := []Event{GPUEvent("", "a", chat, 2, at(26*time.Hour), at(26*time.Hour+10*time.Second))}

	day1, day2 := at(0).Format(time.DateOnly), at(25*time.Hour).Format(time.DateOnly)
	cases := []struct {
		by       string
		from, to time.Time
		want     []Group
	}{
		{ByJob, at(0), at(48 * time.Hour), []Group{
			{Key: "big", Usage: Usage{GPUSeconds: 16 * 3600}},
			{Key: "chat", Usage: Usage{GPUSeconds: 2*3600 + 2*3600 + 20, Requests: 3, TokensIn: 100, TokensOut: 200}},
		}},
		{ByDay, at(0), at(48 * time.Hour), []Group{
			{Key: day1, Usage: Usage{GPUSeconds: 16*3600 + 2*3600, Requests: 3, TokensIn: 100, TokensOut: 200}},
			{Key: day2, Usage: Usage{GPUSeconds: 2*3600 + 20}},
		}},
		{ByKey, at(0), at(48 * time.Hour), []Group{
			{Key: "", Usage: Usage{GPUSeconds: 18*3600 + 2*3600 + 20}},
			{Key: "0123456789abcdef", Usage: Usage{Requests: 3, TokensIn: 100, TokensOut: 200}},
		}},
		{ByNone, at(time.Hour + 10*time.Minute), at(time.Hour + 20*time.Minute), []Group{
			{Usage: Usage{GPUSeconds: 16*3600 + 2*3600, Requests: 3, TokensIn: 100, TokensOut: 200}},
		}},
		{ByModel, at(2 * time.Hour), at(24 * time.Hour), []Group{}},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, x.Query("acme", tc.from, tc.to, tc.by, open), "%s %s..%s", tc.by, tc.from, tc.to)
	}
	assert.EqualValues(t, 6, x.Records())
	var gpu uint64
	for _, tot := range x.Totals() {
		gpu += tot.GPUSeconds
	}
	assert.EqualValues(t, 16*3600+4*3600+8*3600, gpu)
}
