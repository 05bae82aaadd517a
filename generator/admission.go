package generator

import (
	"context"
	"errors"
	"strings"

	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/policy"
)

// AdmissionCheck is the Options.Check of generate: the admission policy the webhook applies,
// over each tenant's rendered files, its denials as the error.
func AdmissionCheck(ctx context.Context) func(tenant string, files render.Files) error {
	return AdmissionCheckWith(ctx, nil)
}

// AdmissionCheckWith is AdmissionCheck decoding each file's content once through cache: for a
// caller that checks a tenant again and again (the product API, on every write), where the
// files of the jobs that did not change are the same bytes as the last time.
func AdmissionCheckWith(ctx context.Context, cache *policy.DecodeCache) func(tenant string, files render.Files) error {
	return func(_ string, files render.Files) error {
		denied, err := cache.ReviewFiles(ctx, nil, files)
		if err != nil {
			return err
		}
		if lines := policy.DenialLines(denied); len(lines) > 0 {
			return errors.New(strings.Join(lines, "\n"))
		}
		return nil
	}
}
