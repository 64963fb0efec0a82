package bench;

import java.nio.ByteBuffer;

import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The "big" workload's processor (--workload=big): the harness's stateful count, but every key's
 * state is a value of --value-bytes bytes (default 200), so that 10M keys make several GB of state,
 * more than the block cache holds. The layout is kstate's (cmd/kstate-count/big.go): the count
 * (8 bytes, big-endian), the last record's send time (8 bytes), then filler that changes on every
 * update and does not compress (a splitmix64 stream seeded by count and send time). One RocksDB
 * key-value store "big" with a changelog; the output is count's 16 bytes.
 */
final class BigCount implements Processor<byte[], byte[], byte[], byte[]> {
    static final String STORE = "big";

    private final int valueBytes;
    private ProcessorContext<byte[], byte[]> context;
    private KeyValueStore<Bytes, byte[]> store;

    BigCount(final int valueBytes) {
        this.valueBytes = valueBytes;
    }

    @Override
    public void init(final ProcessorContext<byte[], byte[]> context) {
        this.context = context;
        this.store = context.getStateStore(STORE);
    }

    @Override
    public void process(final Record<byte[], byte[]> record) {
        final Bytes key = Bytes.wrap(record.key());
        final byte[] in = record.value();
        final long sent = in != null && in.length >= 8 ? ByteBuffer.wrap(in, 0, 8).getLong() : 0L;
        final byte[] old = store.get(key);
        final long count = (old == null ? 0 : ByteBuffer.wrap(old, 0, 8).getLong()) + 1;
        store.put(key, value(new byte[valueBytes], count, sent));
        context.forward(record.withValue(ByteBuffer.allocate(16).putLong(count).putLong(sent).array()));
        KStreamsHeavy.PROCESSED.incrementAndGet();
    }

    /** Fills b (at least 16 bytes) with the state value of count n and send time sent. */
    static byte[] value(final byte[] b, final long n, final long sent) {
        final ByteBuffer w = ByteBuffer.wrap(b);
        w.putLong(n).putLong(sent);
        long x = n * 0x9e3779b97f4a7c15L ^ sent;
        for (int i = 16; i < b.length; i += 8) {
            x = splitmix64(x);
            final byte[] word = ByteBuffer.allocate(8).putLong(x).array();
            System.arraycopy(word, 0, b, i, Math.min(8, b.length - i));
        }
        return b;
    }

    /** The harness's mixing function (load/workload.go). */
    static long splitmix64(long x) {
        x += 0x9e3779b97f4a7c15L;
        x = (x ^ (x >>> 30)) * 0xbf58476d1ce4e5b9L;
        x = (x ^ (x >>> 27)) * 0x94d049bb133111ebL;
        return x ^ (x >>> 31);
    }
}
