package main

import (
	"fmt"
	"time"
)

// parseDuration accepts Go durations ("3m", "90s").
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("parsing duration %q: want e.g. 90s or 3m", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}

// checkStages refuses a --stages list with a stage under one session, naming the
// flag (the scenario's own check would blame the scenario file).
func checkStages(stages []int) error {
	for i, n := range stages {
		if n < 1 {
			return fmt.Errorf("--stages: stage %d is %d sessions; each stage needs at least 1", i+1, n)
		}
	}
	return nil
}
