// Package payloadtest holds fieldwatch's payloads to their type, for
// tests: Check decodes a payload into payload.Payload with unknown keys
// rejected, encodes it again and compares the two key by key; Paths and
// KeyPaths list the keys the type has and a payload uses, so that a test
// can tell which keys its payloads never exercised.
//
// It imports package payload and the standard library only, so that the
// tests of any package (rules, the command, the end-to-end tests) can use
// it.
package payloadtest
