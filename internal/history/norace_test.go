//go:build !race

package history

// raceDetector is set when the tests run with -race.
const raceDetector = false
