package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/buildinfo"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "warden", buildinfo.Version(), runtime.Version())
		},
	}
}
