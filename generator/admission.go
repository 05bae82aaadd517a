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
	return func(_ string, files render.Files) error {
		denied, err := policy.ReviewFiles(ctx, nil, files)
		if err != nil {
			return err
		}
		if lines := policy.DenialLines(denied); len(lines) > 0 {
			return errors.New(strings.Join(lines, "\n"))
		}
		return nil
	}
}
