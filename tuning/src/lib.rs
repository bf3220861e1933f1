//! tuning
