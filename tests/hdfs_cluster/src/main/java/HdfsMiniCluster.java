import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A one-DataNode HDFS with WebHDFS, for the tests: prints a ready line and runs until its
 * standard input closes (the test process ended, however it ended) or it is killed.
 * Arguments: the cluster's base folder, the NameNode's HTTP port (0: any).
 */
public class HdfsMiniCluster {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.setBoolean("dfs.webhdfs.enabled", true);
    // Every test writes as a user of its choosing (--hdfs_user), none of them root.
    conf.setBoolean("dfs.permissions.enabled", false);
    // WebHDFS sends reads and writes to the DataNode's address: the loopback one.
    conf.set("dfs.datanode.hostname", "127.0.0.1");
    conf.setInt("dfs.replication", 1);

    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, new File(args[0]))
        .numDataNodes(1)
        .nameNodeHttpPort(Integer.parseInt(args[1]))
        .format(true)
        .build();
    cluster.waitActive();
    System.out.println("HDFS ready: NameNode HTTP port "
        + cluster.getNameNode().getHttpAddress().getPort());
    System.out.flush();
    while (System.in.read() != -1) {
      // Nothing is sent: the read returns -1 once the test process is gone.
    }
    cluster.shutdown();
  }
}
