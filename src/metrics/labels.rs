//! The label sets of the metrics: each a name the exposition shows, with
//! values from a fixed list its metric's help names.

use prometheus_client::encoding::EncodeLabelSet;

/// `{outcome="done"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// `{result="sent"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// `{kind="paid", outcome="stored"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabel {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// `{on="marks"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OnLabel {
    pub on: &'static str,
}

/// `{action="replaced"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: &'static str,
}

/// `{problem="repeated_key"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProblemLabel {
    pub problem: &'static str,
}

/// `{regime="eu"}` and the like.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegimeLabel {
    pub regime: &'static str,
}
