package kstatetest

import (
	"log/slog"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// config is the driver's flat view of the Topology under test and the
// few run settings the driver uses (ApplicationID, Logger): one field per
// setting, as the engine wiring reads them.
type config[K, I, O any] struct {
	ApplicationID          string
	Logger                 *slog.Logger
	MaxRecordBytes         int // 0: the engine's default, as kstate.Options.Kafka.MaxRecordBytes
	InputTopics            []string
	Inputs                 []kstate.Input[I]
	GroupBy                []kstate.GroupBy[K, I]
	KeySerde               serde.Serde[K]
	ValueSerde             serde.Deserializer[I]
	ValueFromRecord        func(rec processor.Record) (I, error)
	OnDecodeError          kstate.DecodeErrorPolicy
	OnKeyPartitionMismatch kstate.KeyPartitionPolicy
	OnProcessingError      kstate.ProcessingErrorPolicy
	NewProcessor           func() processor.StatefulProcessor[K, I, O]
	TimeMode               processor.TimeMode
	OutputMode             processor.OutputMode
	EventTime              func(value I, recordTimestampMs int64) int64
	AllowedLateness        time.Duration
	OutputTopic            string
	OutputSerde            serde.Serializer[O]
	OutputTopics           []processor.NamedTopic
	OutputKey              func(key K, out O) []byte
	OutputEventTime        func(out O) int64
	Sinks                  []kstate.Sink[K, O]
	InitialState           kstate.InitialState[K]
}

// newConfig flattens t with the driver's options o.
func newConfig[K, I, O any](t kstate.Topology[K, I, O], o options) config[K, I, O] {
	return config[K, I, O]{
		ApplicationID:          o.appID,
		Logger:                 o.logger,
		Inputs:                 t.Inputs,
		GroupBy:                t.GroupBy,
		KeySerde:               t.KeySerde,
		OnDecodeError:          t.OnDecodeError,
		OnKeyPartitionMismatch: t.OnKeyPartitionMismatch,
		OnProcessingError:      t.OnProcessingError,
		NewProcessor:           t.NewProcessor,
		TimeMode:               t.TimeMode,
		OutputMode:             t.OutputMode,
		EventTime:              t.EventTime,
		AllowedLateness:        t.AllowedLateness,
		OutputTopic:            t.Output.Topic,
		OutputSerde:            t.Output.Serde,
		OutputTopics:           t.Output.EmitTo,
		OutputKey:              t.Output.Key,
		OutputEventTime:        t.Output.EventTime,
		Sinks:                  t.Output.Sinks,
		InitialState:           t.InitialState,
	}
}
