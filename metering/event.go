package metering

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// The records are CloudEvents 1.0 in their JSON format, one per line: the shape OpenMeter
// ingests (POST /api/v1/events, or a collector reading the lines). A CloudEvent is identified by
// its source and id together, and OpenMeter drops an event whose source and id it has already
// taken, so the id of a record is derived from what it measures, never from when it was
// written: the same interval of the same VMI always gets the same id, whoever writes it.

// Event types.
const (
	// TypeGPU is the GPU time one VM held in one hour (data.gpuSeconds).
	TypeGPU = "io.inferplane.usage.gpu"
	// TypeTokens is one API key's requests and tokens at one job in one hour.
	TypeTokens = "io.inferplane.usage.tokens"
	// DefaultSource is the events' source unless the meter is told another.
	DefaultSource = "inferplane/meter"
	specVersion   = "1.0"
)

// Event is one usage record as a CloudEvent.
type Event struct {
	SpecVersion     string    `json:"specversion"`
	Type            string    `json:"type"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Subject         string    `json:"subject"` // the tenant: what OpenMeter aggregates by
	Time            time.Time `json:"time"`    // the start of the period measured
	DataContentType string    `json:"datacontenttype"`
	Data            Data      `json:"data"`
}

// Data is what a record measures, with its billing labels.
type Data struct {
	Labels
	// PeriodEnd ends the period that starts at the event's time (within one UTC hour).
	PeriodEnd time.Time `json:"periodEnd"`
	// GPU records: the VMI, its GPUs, the seconds of the period and their product.
	VMI        string `json:"vmi,omitempty"`
	GPUs       int    `json:"gpus,omitempty"`
	Seconds    int64  `json:"seconds,omitempty"`
	GPUSeconds int64  `json:"gpuSeconds,omitempty"`
	// Token records.
	Requests  uint64 `json:"requests,omitempty"`
	TokensIn  uint64 `json:"tokensIn,omitempty"`
	TokensOut uint64 `json:"tokensOut,omitempty"`
}

// GPUEvent is the record of a VMI holding gpus GPUs over [from, to).
func GPUEvent(source, uid string, l Labels, gpus int, from, to time.Time) Event {
	secs := int64(to.Sub(from) / time.Second)
	return Event{
		SpecVersion: specVersion, Type: TypeGPU, ID: eventID("gpu", uid, itoa(from.Unix())),
		Source: source, Subject: l.Tenant, Time: from.UTC(), DataContentType: "application/json",
		Data: Data{Labels: l, PeriodEnd: to.UTC(), VMI: uid, GPUs: gpus, Seconds: secs, GPUSeconds: secs * int64(gpus)},
	}
}

// TokenEvent is the record of one key's use of one job in the hour starting at hour.
func TokenEvent(source string, l Labels, hour time.Time, requests, in, out uint64) Event {
	return Event{
		SpecVersion: specVersion, Type: TypeTokens, ID: eventID("tokens", l.Tenant, l.Key, l.Job, itoa(hour.Unix())),
		Source: source, Subject: l.Tenant, Time: hour.UTC(), DataContentType: "application/json",
		Data: Data{Labels: l, PeriodEnd: hour.Add(time.Hour).UTC(), Requests: requests, TokensIn: in, TokensOut: out},
	}
}

// eventID hashes what a record measures into 32 hex digits.
func eventID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Check says what is wrong with an event read back (a record file edited by hand, or written
// by another build), naming the field.
func (e *Event) Check() error {
	var errs []error
	if e.SpecVersion != specVersion {
		errs = append(errs, fmt.Errorf("specversion is %q: want %q", e.SpecVersion, specVersion))
	}
	if e.Type != TypeGPU && e.Type != TypeTokens {
		errs = append(errs, fmt.Errorf("type is %q: want %s or %s", e.Type, TypeGPU, TypeTokens))
	}
	if e.ID == "" {
		errs = append(errs, errors.New("id is empty"))
	}
	if e.Data.Tenant == "" {
		errs = append(errs, errors.New("data.tenant is empty"))
	}
	if e.Time.IsZero() || !e.Data.PeriodEnd.After(e.Time) {
		errs = append(errs, fmt.Errorf("time %s and data.periodEnd %s: want a period that ends after it starts", e.Time, e.Data.PeriodEnd))
	}
	return errors.Join(errs...)
}
