package render

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNameChecksAgreeWithAPIMachinery: the quick checks accept exactly what apimachinery's
// validation accepts.
func TestNameChecksAgreeWithAPIMachinery(t *testing.T) {
	names := []string{"", "a", "A", "0", "-", "a-", "-a", "a-b", "a--b", "a.b", "a..b", ".a", "a.", "a_b", "a b",
		"abc-123", "7b", "7b-r0", "qwen-r1-n0", "metal3.gpu-h100", "metal3.*", "Qwen3", "kimi-k2-instruct-h200-2n",
		"é", "a/b", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a",
		strings.Repeat("a", 253), strings.Repeat("a", 254), "x_", "_x", "x.y_z-1", "A.B"}
	for _, s := range names {
		for _, c := range []struct {
			name       string
			fast, slow func(string) []string
		}{
			{"DNS-1123 label", dns1123LabelErrs, validation.IsDNS1123Label},
			{"DNS-1123 subdomain", dns1123SubdomainErrs, validation.IsDNS1123Subdomain},
			{"label value", labelValueErrs, validation.IsValidLabelValue},
		} {
			if fast, slow := len(c.fast(s)) == 0, len(c.slow(s)) == 0; fast != slow {
				t.Errorf("%s %q: quick check says valid=%v, apimachinery %v", c.name, s, fast, slow)
			}
		}
	}
}

// FuzzNameChecks holds the quick checks to apimachinery on any string.
func FuzzNameChecks(f *testing.F) {
	for _, s := range []string{"a-b", "a.b", "A_b", "-", "7b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if (len(dns1123LabelErrs(s)) == 0) != (len(validation.IsDNS1123Label(s)) == 0) ||
			(len(dns1123SubdomainErrs(s)) == 0) != (len(validation.IsDNS1123Subdomain(s)) == 0) ||
			(len(labelValueErrs(s)) == 0) != (len(validation.IsValidLabelValue(s)) == 0) {
			t.Fatalf("quick checks and apimachinery disagree on %q", s)
		}
	})
}
