package kafka

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// MaxTopicName is the longest topic name Kafka accepts.
const MaxTopicName = 249

// LongestTopicSuffix is the longest suffix kstate appends to an
// application id to name a topic it owns ("-repartition"; the others are
// "-changelog" and "-dlq"), so an application id is at most
// MaxTopicName - len(LongestTopicSuffix) characters long.
const LongestTopicSuffix = "-repartition"

var legalName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// CheckTopic checks a topic name against Kafka's rules: 1 to 249 letters,
// digits, '.', '_' or '-', and not "." or "..". The error says what is
// wrong, without the name (the caller names the field and the value).
func CheckTopic(name string) error {
	return checkName(name, MaxTopicName)
}

// CheckApplicationID checks an application id: the rules of a topic name
// for "<id>-repartition" (the longest topic name derived from it), which
// also make it a consumer group id, a transactional id prefix and a single
// directory name ("." and ".." refused: <StateDir>/<id> must stay inside
// StateDir).
func CheckApplicationID(id string) error {
	return checkName(id, MaxTopicName-len(LongestTopicSuffix))
}

// CheckInstanceID checks an instance id: a group instance id and the
// suffix of "<ApplicationID>-<InstanceID>" (the transactional id), of the
// characters of a topic name, at most 249 long, not "." or "..".
func CheckInstanceID(id string) error {
	return checkName(id, MaxTopicName)
}

func checkName(s string, max int) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case !legalName.MatchString(s):
		return errors.New("want letters, digits, '.', '_' or '-'")
	case s == "." || s == "..":
		return errors.New(`"." and ".." are not allowed (Kafka refuses them, and a directory named so leaves StateDir)`)
	case len(s) > max:
		return fmt.Errorf("is %d characters long, over the maximum of %d", len(s), max)
	}
	return nil
}

var hostName = regexp.MustCompile(`^[a-zA-Z0-9_]([a-zA-Z0-9._-]*[a-zA-Z0-9_])?$`)

// CheckBroker checks a bootstrap address: "host:port" or "host" (port
// 9092), the host a name or an IP address ("[::1]:9092" for IPv6 with a
// port), the port 1 to 65535. It catches typos that the client would
// otherwise retry for the whole start-up timeout ("", "::not a host::").
func CheckBroker(addr string) error {
	if addr == "" {
		return errors.New("is empty")
	}
	host, port := addr, ""
	if strings.Contains(addr, ":") && net.ParseIP(addr) == nil {
		var err error
		if host, port, err = net.SplitHostPort(addr); err != nil {
			return fmt.Errorf(`want "host:port" (IPv6: "[::1]:9092"): %v`, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q: want 1 to 65535", port)
		}
	}
	if host == "" {
		return errors.New(`has no host: want "host:port"`)
	}
	ip, _, _ := strings.Cut(host, "%") // an IPv6 zone: "fe80::1%eth0"
	if net.ParseIP(ip) == nil && !hostName.MatchString(host) {
		return fmt.Errorf("host %q is neither a host name nor an IP address", host)
	}
	return nil
}
