package console

import (
	"cmp"
	"errors"
	"net/http"
	"time"
)

// Ranges are the usage page's periods, by their query value.
var ranges = []struct {
	Value, Label string
	Span         time.Duration
}{
	{"24h", "Last 24 hours", 24 * time.Hour},
	{"7d", "Last 7 days", 7 * 24 * time.Hour},
	{"30d", "Last 30 days", 30 * 24 * time.Hour},
}

// chart is what usage.js draws with uPlot: one x value per hour (Unix seconds) and a series of
// values per key or endpoint, each as long as X.
type chart struct {
	Title  string        `json:"title"`
	Unit   string        `json:"unit"`
	X      []int64       `json:"x"`
	Series []chartSeries `json:"series"`
}

type chartSeries struct {
	Label  string   `json:"label"`
	Values []uint64 `json:"values"`
}

type usageData struct {
	Range  string
	Ranges any
	Usage  *Usage
	Health *Health
	Charts []chart
	Err    string
	// UsageErr and HealthErr say why usage or health cannot be read (the gateways are not
	// configured or do not answer): the rest of the page is still shown.
	UsageErr, HealthErr string
}

// usage is usage per key and endpoint as charts over a chosen range (uPlot, with a table of
// the same figures for screen readers and without script), and each endpoint's health.
func (h *Handler) usage(c *call) {
	d := usageData{Range: "24h", Ranges: ranges}
	span := ranges[0].Span
	for _, rg := range ranges {
		if rg.Value == c.r.URL.Query().Get("range") {
			d.Range, span = rg.Value, rg.Span
		}
	}
	to := h.now().UTC().Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-span)
	u, err := h.opts.Backend.Usage(c.r.Context(), c.id, c.tenant, from, to)
	if d.UsageErr, err = unavailable(err); err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	health, err := h.opts.Backend.Health(c.r.Context(), c.id, c.tenant)
	if d.HealthErr, err = unavailable(err); err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	d.Usage, d.Health = cmp.Or(u, &Usage{}), cmp.Or(health, &Health{})
	u = d.Usage
	d.Charts = []chart{
		hourly("Requests per hour, per key", "requests", from, to, u.Keys, func(c Counts) uint64 { return c.Requests }),
		hourly("Tokens per hour (in + out), per key", "tokens", from, to, u.Keys, func(c Counts) uint64 { return c.TokensIn + c.TokensOut }),
		hourly("Requests per hour, per endpoint", "requests", from, to, u.Endpoints, func(c Counts) uint64 { return c.Requests }),
		hourly("Tokens per hour (in + out), per endpoint", "tokens", from, to, u.Endpoints, func(c Counts) uint64 { return c.TokensIn + c.TokensOut }),
	}
	v := h.viewFor(c, "Usage and health", "usage", d)
	v.Scripts = []string{"vendor/uPlot.iife.min.js", "usage.js"}
	v.Styles = []string{"vendor/uPlot.min.css"}
	h.render(c.w, c.r, http.StatusOK, "usage", v)
}

// unavailable splits a backend's refusal because something it reads is not there (a 5xx
// problem: no gateway configured, a gateway down) from other errors, which fail the page.
func unavailable(err error) (string, error) {
	var p *Problem
	if errors.As(err, &p) && p.Status >= 500 {
		return problemText(p), nil
	}
	return "", err
}

// hourly lays series out on every hour of [from, to), hours without counts at 0.
func hourly(title, unit string, from, to time.Time, series []Series, value func(Counts) uint64) chart {
	c := chart{Title: title, Unit: unit}
	index := map[int64]int{}
	for t := from; t.Before(to); t = t.Add(time.Hour) {
		index[t.Unix()] = len(c.X)
		c.X = append(c.X, t.Unix())
	}
	for _, s := range series {
		cs := chartSeries{Label: s.Name, Values: make([]uint64, len(c.X))}
		for _, hc := range s.Hours {
			if i, ok := index[hc.Hour.UTC().Truncate(time.Hour).Unix()]; ok {
				cs.Values[i] += value(hc.Counts)
			}
		}
		c.Series = append(c.Series, cs)
	}
	return c
}
