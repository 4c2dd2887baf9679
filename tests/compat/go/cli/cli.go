// Package cli holds what both Go drivers of tests/compat do with their command lines:
// one JSON line out per result, and a clear exit on a failed step.
package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// Out prints v as one JSON line.
func Out(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// Must exits 1, saying what failed, when err is not nil.
func Must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

// Atoi is strconv.Atoi for command-line numbers.
func Atoi(s string) int {
	n, err := strconv.Atoi(s)
	Must(err, "number "+s)
	return n
}
