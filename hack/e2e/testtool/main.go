// Command testtool is the one program in the e2e test-tools image: a static
// binary that stands in for busybox in end-to-end scenarios.
//
// Its arguments are a list of steps, run in order:
//
//	echo TEXT          print TEXT and a newline on stdout
//	stderr TEXT        print TEXT and a newline on stderr
//	cat                copy stdin to stdout
//	bytes N            print N bytes ('x'), no newline
//	term TEXT          write TEXT to the termination message file
//	                   ($TERMINATION_MESSAGE_PATH, default /dev/termination-log)
//	term-stdin         write stdin to the termination message file
//	ignore-sigterm     ignore SIGTERM (and SIGINT) from here on
//	sleep DURATION     sleep; DURATION is a Go duration (1m30s) or seconds (90)
//	api PATH           GET PATH from the API server with the pod's service
//	                   account token; prints "status=CODE" then the body
//	env                print the environment
//	exit N             exit with code N
//
// With no step left it exits 0. Example, a tool result through the termination
// message and the log:  testtool echo started term '{"ok":true}' exit 0
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testtool STEP [ARGS]... [STEP [ARGS]...]...")
		os.Exit(2)
	}
	for len(args) > 0 {
		step := args[0]
		args = args[1:]
		need := func() string {
			if len(args) == 0 {
				fail(2, "%s: missing argument", step)
			}
			a := args[0]
			args = args[1:]
			return a
		}
		switch step {
		case "echo":
			fmt.Println(need())
		case "stderr":
			fmt.Fprintln(os.Stderr, need())
		case "cat":
			if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
				fail(1, "cat: %v", err)
			}
		case "bytes":
			n, err := strconv.Atoi(need())
			if err != nil || n < 0 {
				fail(2, "bytes: want a count")
			}
			if _, err := os.Stdout.Write(bytes.Repeat([]byte{'x'}, n)); err != nil {
				fail(1, "bytes: %v", err)
			}
		case "term":
			writeTerm([]byte(need()))
		case "term-stdin":
			b, err := io.ReadAll(os.Stdin)
			if err != nil {
				fail(1, "term-stdin: %v", err)
			}
			writeTerm(b)
		case "ignore-sigterm":
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		case "sleep":
			time.Sleep(parseDuration(need()))
		case "api":
			api(need())
		case "env":
			for _, e := range os.Environ() {
				fmt.Println(e)
			}
		case "exit":
			n, err := strconv.Atoi(need())
			if err != nil {
				fail(2, "exit: want a number")
			}
			os.Exit(n)
		default:
			fail(2, "unknown step %q", step)
		}
	}
}

func fail(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "testtool: "+format+"\n", a...)
	os.Exit(code)
}

func parseDuration(s string) time.Duration {
	if d, err := time.ParseDuration(s); err == nil {
		return d
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fail(2, "sleep: bad duration %q", s)
	}
	return time.Duration(f * float64(time.Second))
}

func writeTerm(b []byte) {
	p := os.Getenv("TERMINATION_MESSAGE_PATH")
	if p == "" {
		p = "/dev/termination-log"
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		fail(1, "term: %v", err)
	}
}

func api(path string) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		fail(1, "api: KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		fail(1, "api: %v", err)
	}
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(saDir + "/ca.crt"); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		fail(2, "api: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		fail(1, "api: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("status=%d\n%s\n", resp.StatusCode, body)
}
