// Package jsonscan finds the parts of JSON without decoding them: the
// keys of an object and where each value ends (EachKey), and where each
// object of a stream of them ends (Framer), so that a large value costs
// one pass over its bytes and is decoded only by whoever needs it. It
// checks the punctuation, strings and nesting it walks; whoever decodes
// a value checks the rest.
//
// Decode is that decoder for the values fieldwatch decodes whole: one
// pass over the bytes, with the result and the errors of apimachinery's
// json.Unmarshal into an any (FuzzDecode holds the two together), and
// DecodeShared leaves the strings in the input's bytes.
package jsonscan
