// Package envoylua holds the Envoy Lua filter that lifts the OpenAI "usage" object of every
// response (JSON or an SSE stream) into dynamic metadata, where the gRPC access log carries it
// to the usage service (the names are internal/envoymeta's). See usage.lua for how, and
// docs/keys.md for why Lua over ext_proc.
package envoylua

import _ "embed"

// Script is the filter's Lua source (Envoy's default_source_code).
//
//go:embed usage.lua
var Script string
