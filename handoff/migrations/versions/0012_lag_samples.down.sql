DROP TABLE handoff.lag_sampler, handoff.consumer_lag;
