package render

import (
	"k8s.io/apimachinery/pkg/util/validation"
)

// Name checks: apimachinery's validation (regular expressions, and the messages we show),
// behind quick byte checks that accept exactly the same valid names, so a render of valid
// input does not pay for the expressions. names_test.go holds the two to the same answers.

func dns1123LabelErrs(s string) []string {
	if len(s) <= validation.DNS1123LabelMaxLength && isLabelShape(s) {
		return nil
	}
	return validation.IsDNS1123Label(s)
}

func dns1123SubdomainErrs(s string) []string {
	if len(s) <= validation.DNS1123SubdomainMaxLength && isSubdomainShape(s) {
		return nil
	}
	return validation.IsDNS1123Subdomain(s)
}

func labelValueErrs(s string) []string {
	if len(s) <= validation.LabelValueMaxLength && isLabelValueShape(s) {
		return nil
	}
	return validation.IsValidLabelValue(s)
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isNum(c byte) bool   { return c >= '0' && c <= '9' }

// isLabelShape: [a-z0-9]([-a-z0-9]*[a-z0-9])?.
func isLabelShape(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLower(c) && !isNum(c) && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// isSubdomainShape: labels of isLabelShape joined by dots.
func isSubdomainShape(s string) bool {
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !isLabelShape(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// isLabelValueShape: empty, or alphanumeric at both ends with [-_.A-Za-z0-9] between.
func isLabelValueShape(s string) bool {
	alnum := func(c byte) bool { return isLower(c) || isNum(c) || c >= 'A' && c <= 'Z' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !alnum(c) && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
