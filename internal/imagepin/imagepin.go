// Package imagepin tells whether a container image reference names one build or a tag that can
// be moved to another build at any time (`latest`, `nightly`, no tag at all): a model server on
// a moving tag changes under a restart, with no commit saying so. `validate` warns on moving
// tags; the defaults (api/v1alpha1) are pinned releases.
package imagepin

import (
	"strings"
	"unicode"
)

// channels are tags that name a channel of builds, not one: each moves with every new build.
var channels = map[string]bool{
	"latest": true, "nightly": true, "main": true, "master": true, "dev": true, "devel": true,
	"edge": true, "stable": true, "rolling": true, "canary": true, "beta": true, "alpha": true, "head": true,
}

// Moving says why image (with digest, the master's spec.imageDigest, "" when none) can become
// another build under the same reference, or "" when it is pinned: by a digest (here or in the
// reference), or by a tag that carries a version number (a release tag; a registry does not
// forbid moving it, but moving one is a publisher's mistake, not its practice).
func Moving(image, digest string) string {
	if image == "" || digest != "" || strings.Contains(image, "@") {
		return ""
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok:
		return "has no tag, so it is :latest, which moves to every new build"
	case channels[strings.ToLower(tag)]:
		return "tag " + tag + " moves to every new build"
	case strings.IndexFunc(tag, unicode.IsDigit) < 0:
		return "tag " + tag + " carries no version: it can be moved to another build at any time"
	}
	return ""
}
