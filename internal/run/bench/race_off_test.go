//go:build !race

package bench

// raceSlowdown is 1 without -race (see race_on_test.go).
const raceSlowdown = 1
