// Package image holds the test of inferplane's OCI image: `make image` (hack/image) builds it
// without a container engine, and the test reads the archive as a registry or a runtime would.
package image
