//go:build race

package history

// raceDetector is set when the tests run with -race: modernc.org/sqlite's
// engine, being Go, runs about ten times slower under it.
const raceDetector = true
