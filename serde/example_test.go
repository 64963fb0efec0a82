package serde_test

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/serde"
)

func Example() {
	b, _ := serde.Int64().Serialize(1)
	fmt.Printf("% x\n", b)

	// A record value written by Kafka's Java LongSerializer.
	v, _ := serde.Int64().Deserialize([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})
	fmt.Println(v)

	// A tombstone (null value) is not an int64.
	_, err := serde.Int64().Deserialize(nil)
	fmt.Println(errors.Is(err, serde.ErrSize))
	// Output:
	// 00 00 00 00 00 00 00 01
	// -2
	// true
}

func ExampleJSON() {
	type click struct {
		User string `json:"user"`
		Page string `json:"page"`
	}
	s := serde.JSON[click]()
	b, _ := s.Serialize(click{User: "ada", Page: "/home"})
	fmt.Println(string(b))

	_, err := s.Deserialize([]byte(`{"user":`))
	fmt.Println(err)
	// Output:
	// {"user":"ada","page":"/home"}
	// serde: JSON[serde_test.click]: deserialize: unexpected end of JSON input
}
