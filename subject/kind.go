package subject

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/edgegate/gateway/internal/option"
)

// Kind is a source of identity: one of the fixed sources (Principal,
// APIKey, ...) or a request field a configuration names
// ("header:X-Tenant"), made by ParseKind. Kinds compare with ==; the zero
// Kind is no source. Its String is part of every pseudonym it signs.
type Kind struct {
	source source
	field  string // the header (canonical), cookie or query parameter
	name   string // as the configuration writes it, field canonical
}

// source is what a Kind reads.
type source uint8

const (
	sourceNone source = iota
	sourcePrincipal
	sourceAPIKey
	sourceClientIP
	sourceJWT
	sourceClientCert
	sourceHeader
	sourceCookie
	sourceQuery
	sourceJA4
	sourceJA4ClientIP
)

// The fixed sources.
var (
	Principal = Kind{source: sourcePrincipal, name: "principal"}
	APIKey    = Kind{source: sourceAPIKey, name: "api_key"}
	ClientIP  = Kind{source: sourceClientIP, name: "client_ip"}
	// JWT is the principal of a verified bearer token.
	JWT = Kind{source: sourceJWT, name: "jwt"}
	// ClientCert is the identity of a TLS client certificate whose chain
	// verified (client_cert.go).
	ClientCert = Kind{source: sourceClientCert, name: "client_cert"}
	// JA4 is the JA4 fingerprint of the client's TLS ClientHello
	// (Options.TLSFingerprint). Many clients share one.
	JA4 = Kind{source: sourceJA4, name: "ja4"}
	// JA4ClientIP is the JA4 fingerprint and the client_ip identity
	// together: one subject per fingerprint per address.
	JA4ClientIP = Kind{source: sourceJA4ClientIP, name: "ja4+client_ip"}
)

func (k Kind) String() string {
	if k.name == "" {
		return "none"
	}
	return k.name
}

// kinds are the fixed Kinds in the order the documentation lists them.
var kinds = []Kind{Principal, APIKey, ClientIP, JWT, ClientCert, JA4, JA4ClientIP}

// fieldSources are the sources named "PREFIX:NAME", by prefix.
var fieldSources = map[string]source{"header": sourceHeader, "cookie": sourceCookie, "query": sourceQuery}

// fieldExamples are names the diagnostics give as examples, by prefix.
var fieldExamples = map[string]string{"header": "header:X-Tenant", "cookie": "cookie:session", "query": "query:api_key"}

// ParseKind maps a configuration name to a Kind: a fixed source's name, or
// "header:NAME", "cookie:NAME" or "query:NAME" with NAME a ValidName (a
// header name is taken in canonical form). A name it does not take is an
// *option.Error of the field subject.
func ParseKind(s string) (Kind, error) {
	for _, k := range kinds {
		if k.name == s {
			return k, nil
		}
	}
	prefix, field, ok := strings.Cut(s, ":")
	src, known := fieldSources[prefix]
	if !ok || !known {
		names := make([]string, 0, len(kinds)+len(fieldSources))
		for _, k := range kinds {
			names = append(names, k.name)
		}
		names = append(names, "header:NAME", "cookie:NAME", "query:NAME")
		return Kind{}, option.Unknown("subject", "Unknown subject source", s, names)
	}
	if !ValidName(field) {
		return Kind{}, &option.Error{Field: "subject", Summary: "Invalid subject source",
			Detail: fmt.Sprintf("%s: the %s name must be 1 to 128 letters, digits, '.', '-' and '_', such as %s.", s, prefix, fieldExamples[prefix])}
	}
	if src == sourceHeader {
		field = http.CanonicalHeaderKey(field)
	}
	return Kind{source: src, field: field, name: prefix + ":" + field}, nil
}

// ParseNamed splits a subject as the admin API names one, KIND:IDENTITY,
// where KIND may itself be a field source ("header:X-Tenant:acme").
func ParseNamed(s string) (Kind, string, error) {
	prefix, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Kind{}, "", errors.New("no ':' after the kind")
	}
	kindName, identity := prefix, rest
	if _, field := fieldSources[prefix]; field {
		name, id, ok := strings.Cut(rest, ":")
		if !ok {
			return Kind{}, "", fmt.Errorf("a %s subject is %s:NAME:IDENTITY", prefix, prefix)
		}
		kindName, identity = prefix+":"+name, id
	}
	k, err := ParseKind(kindName)
	if err != nil {
		return Kind{}, "", err
	}
	return k, identity, nil
}
