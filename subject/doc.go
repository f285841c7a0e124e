// Package subject works out who is asking and turns it into a pseudonym.
//
// Raw identities (addresses, API keys, principals) never leave this package:
// Resolve returns the kind and the pseudonym only.
package subject
