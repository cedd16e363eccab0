// The JVM arm of scripts/chaos-table.sh: Spark Connect's own Scala/JVM
// client (spark-connect-client-jvm 4.3.0, the jar in the pyspark wheel) runs
// one query, as a program on the jar's classpath (no REPL, no terminal), and
// prints one JSON line: the rows it returned, whether they are exactly
// range(n) with x = 2 * id in order, and the error it raised, if any.
//
// Usage: java -cp CLIENT_JARS:. ChaosJvm --remote sc://HOST:PORT --query SQL
import java.util.Iterator;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.connect.SparkSession;

public final class ChaosJvm {
    public static void main(String[] args) {
        String remote = null;
        String query = null;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--remote": remote = args[i + 1]; break;
                case "--query": query = args[i + 1]; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (remote == null || query == null) {
            throw new IllegalArgumentException("usage: ChaosJvm --remote URL --query SQL");
        }
        SparkSession spark = SparkSession.builder().remote(remote).getOrCreate();
        long start = System.nanoTime();
        long rows = 0;
        String wrong = null;
        String error = null;
        try {
            // Streamed, not collected: 10M rows as Row objects would need GiBs.
            Iterator<Row> it = spark.sql(query).toLocalIterator();
            while (it.hasNext()) {
                Row r = it.next();
                long id = r.getLong(0);
                if (wrong == null && id != rows) {
                    wrong = "row " + rows + " has id " + id;
                }
                if (wrong == null && r.size() > 1 && r.getLong(1) != 2 * id) {
                    wrong = "row " + rows + " has x != id * 2";
                }
                rows++;
            }
            if (it instanceof AutoCloseable) {
                ((AutoCloseable) it).close();
            }
        } catch (Throwable e) {
            // What the client raised is the result under test; the whole
            // trace goes to stderr, for the table's logs.
            e.printStackTrace();
            String msg = String.valueOf(e.getMessage()).split("\n", 2)[0];
            error = e.getClass().getSimpleName() + ": " + msg;
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        try {
            spark.stop();
        } catch (Throwable ignored) {
            // The session may be gone (the restart scenario).
        }
        System.out.println("{\"client\":\"jvm\",\"rows\":" + rows
                + ",\"wrong\":" + json(wrong) + ",\"error\":" + json(error)
                + ",\"seconds\":" + String.format("%.3f", seconds) + "}");
        System.out.flush();
        // Client threads (gRPC, the release pool) must not keep the JVM alive.
        System.exit(0);
    }

    private static String json(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
