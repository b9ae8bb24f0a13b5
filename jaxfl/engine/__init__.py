"""The engine: algorithm protocol, round builder, participation, driver and its callbacks, sweeps, sharding."""
from jaxfl.engine import callbacks, participation, sharding
from jaxfl.engine.driver import TrainResult, make_ledger, run_rounds, train
from jaxfl.engine.protocol import FederatedAlgorithm, PerRound, RoundPrivacy, ServerState, SiloState, initial_state
from jaxfl.engine.participation import Participation
from jaxfl.engine.rounds import Aggregator, RoundContext, make_round, weighted_sum
from jaxfl.engine.sweep import SweepResult, grid_points, sweep

__all__ = ["callbacks", "participation", "sharding", "TrainResult", "make_ledger", "run_rounds", "train",
           "FederatedAlgorithm", "PerRound", "RoundPrivacy", "ServerState", "SiloState", "initial_state",
           "RoundContext", "make_round", "Aggregator", "Participation", "weighted_sum", "SweepResult", "grid_points",
           "sweep"]
