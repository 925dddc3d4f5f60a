package version

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Command is the version command of the agentrun CLI and the kubectl
// plugin: one line, or JSON with -o json.
func Command() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), info.String())
				return err
			case "json":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), info.JSON())
				return err
			}
			return fmt.Errorf("--output %q: want json, or nothing for one line", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for one JSON object")
	return cmd
}
