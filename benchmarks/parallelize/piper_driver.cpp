// One planning call of Piper's own program (msr-fiddle/piper, algo.cpp), for benchmarks/parallelize.
// run.py fetches algo.cpp into a temporary folder and compiles this file there with g++ -O3;
// neither algo.cpp nor the binary is ever part of this project.
//
// usage: piper_driver FILE TRANSFORMERS DEVICES MEMORY_BYTES MICROBATCHES BANDWIDTH [DUMP]
// With DUMP, first writes the instance as built (BERT-48/64/96 grown by Piper's own code, nodes
// renumbered 0..n-1) in Piper's input format, so that both planners read the same model.
// prints one line: time-per-sample (or -1 when no plan fits), CPU seconds of the planning call
// (clock(), as Piper's experiments time it), number of stages.
#define main piper_original_main
#include "algo.cpp"
#undef main

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        cerr << "usage: piper_driver FILE TRANSFORMERS DEVICES MEMORY_BYTES MICROBATCHES BANDWIDTH [DUMP]" << endl;
        return 2;
    }
    json j;
    ifstream f(argv[1]);
    f >> j;
    Instance ins = j.get<Instance>();
    // BERT-48/64/96: the transformer layer repeated as Piper's experiments do (readBERTA100)
    for (int t = 33; t <= atoi(argv[2]); ++t) ins.insertTransformerLayer();
    ins.maxDevices = atoi(argv[3]);
    ins.maxMemoryPerDevice = atof(argv[4]);
    ins.mbsInBatch = atoi(argv[5]);
    ins.bandwidth = atof(argv[6]);
    if (argc == 8) {
        json o = {{"maxDevices", ins.maxDevices}, {"maxMemoryPerDevice", ins.maxMemoryPerDevice},
                  {"bandwidth", ins.bandwidth}, {"mbsInBatch", ins.mbsInBatch},
                  {"nodes", json::array()}, {"edges", json::array()}};
        for (const Node &n : ins.nodes) {
            json jn = {{"id", n.id}, {"name", n.name}, {"TMPCs", json::object()}};
            for (const auto &it : n.TMPCs) {
                json arr = json::array();
                for (const TMPC &t : it.second) {
                    json fw = json::object(), bw = json::object();
                    for (const auto &p : t.syncTimeFw) fw[to_string(p.first)] = p.second;
                    for (const auto &p : t.syncTimeBw) bw[to_string(p.first)] = p.second;
                    arr.push_back({{"id", t.id}, {"timePerSample", t.timePerSample}, {"parameterSize", t.parameterSize},
                                   {"memoryUsageA", t.memoryUsageA}, {"memoryUsageB", t.memoryUsageB},
                                   {"syncTimeFw", fw}, {"syncTimeBw", bw}});
                }
                jn["TMPCs"][to_string(it.first)] = arr;
            }
            o["nodes"].push_back(jn);
        }
        for (const Edge &e : ins.edges)
            o["edges"].push_back({{"sourceId", e.sourceId}, {"destId", e.destId}, {"communicationCost", e.communicationCost}});
        ofstream(argv[7]) << o.dump();
        return 0;
    }
    clock_t start = clock();
    Graph g(ins);
    Result r = g.runDP();
    double cpu = (clock() - start) * 1.0 / CLOCKS_PER_SEC;
    double tps = r.stages.empty() ? -1 : g.getTPSForResult(r);
    cout << setprecision(17) << tps << " " << cpu << " " << r.stages.size() << endl;
    return 0;
}
